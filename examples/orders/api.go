package orders

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxkit/backpressure/outbox"
	"github.com/outboxkit/backpressure/pgstore"
)

// Order is the API's order, as POST /orders takes it and GET /orders/{id}
// returns it.
type Order struct {
	ID       string `json:"id"`
	Tenant   string `json:"tenant"`
	Item     string `json:"item"`
	Quantity int    `json:"quantity"`
	Status   string `json:"status,omitempty"` // "placed" or "fulfilled"; set by the service
}

// maxBody bounds a request body.
const maxBody = 64 << 10

// RunAPI serves the API on c.Addr until ctx is done, then shuts it down
// (in-flight requests get 10s).
func RunAPI(ctx context.Context, c Config) error {
	pool, err := pgxpool.New(ctx, c.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := c.migrate(ctx, pool); err != nil {
		return err
	}
	store, err := pgstore.New(ctx, pool, pgstore.Options{
		Schema:      c.outboxSchema(),
		PendingCaps: outbox.PendingCaps{Default: c.PendingCap},
	})
	if err != nil {
		return err
	}
	defer store.Close()
	a := &api{c: c, pool: pool, store: store}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", a.place)
	mux.HandleFunc("GET /orders/{id}", a.get)
	srv := &http.Server{Addr: c.Addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Printf("orders-api: listening on %s", c.Addr)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

type api struct {
	c     Config
	pool  *pgxpool.Pool
	store *pgstore.Store
}

// place inserts the order and enqueues its fulfilment in one transaction:
// both or neither. An order id seen before is not placed twice (200, the
// order as it is); a tenant at its pending cap gets 429 and nothing is
// inserted.
func (a *api) place(w http.ResponseWriter, r *http.Request) {
	var o Order
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		http.Error(w, "bad order: "+err.Error(), http.StatusBadRequest)
		return
	}
	if o.ID == "" || o.Tenant == "" || o.Item == "" || o.Quantity < 1 {
		http.Error(w, "bad order: id, tenant and item are required, quantity ≥ 1", http.StatusBadRequest)
		return
	}
	placed := false
	err := pgx.BeginFunc(r.Context(), a.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(r.Context(), fmt.Sprintf(
			`INSERT INTO %s (id, tenant, item, quantity) VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO NOTHING`, a.c.table()),
			o.ID, o.Tenant, o.Item, o.Quantity)
		if err != nil || tag.RowsAffected() == 0 {
			return err // a repeat: the first request enqueued it
		}
		msg, err := outbox.NewMessage(o.Tenant, "order/"+o.ID, Fulfil{OrderID: o.ID})
		if err != nil {
			return err
		}
		placed = true
		_, err = a.store.EnqueueTx(r.Context(), tx, []outbox.Message{msg})
		return err
	})
	var bad *outbox.MessageError
	switch {
	case errors.Is(err, outbox.ErrPendingCap):
		// The tenant's backlog is full: ask the client to come back
		// once the workers have drained some of it.
		w.Header().Set("Retry-After", "1")
		http.Error(w, "too many unfulfilled orders for tenant "+o.Tenant, http.StatusTooManyRequests)
		return
	case errors.As(err, &bad):
		http.Error(w, "bad order: "+bad.Error(), http.StatusBadRequest)
		return
	case err != nil:
		log.Printf("orders-api: placing %s: %v", o.ID, err)
		http.Error(w, "could not place the order", http.StatusInternalServerError)
		return
	}
	if placed {
		w.WriteHeader(http.StatusCreated)
	}
	a.write(w, r, o.ID)
}

func (a *api) get(w http.ResponseWriter, r *http.Request) { a.write(w, r, r.PathValue("id")) }

// write answers with the order as stored.
func (a *api) write(w http.ResponseWriter, r *http.Request, id string) {
	var o Order
	err := a.pool.QueryRow(r.Context(), fmt.Sprintf(
		`SELECT id, tenant, item, quantity, status FROM %s WHERE id = $1`, a.c.table()), id).
		Scan(&o.ID, &o.Tenant, &o.Item, &o.Quantity, &o.Status)
	if errors.Is(err, pgx.ErrNoRows) {
		http.Error(w, "no such order", http.StatusNotFound)
		return
	}
	if err != nil {
		http.Error(w, "could not read the order", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(o)
}
