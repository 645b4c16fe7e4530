package admin

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// Options configures [NewHandler]. The zero value is a read-only handler
// that refreshes its tenants page every 5s.
type Options struct {
	// Actions enables the POST actions: requeue and purge dead letters,
	// pause and resume a namespace, set its quota or rate, reset it. Off
	// (the default), the pages show no action and every POST is refused
	// with 403.
	Actions bool
	// Refresh is how often the tenants and tenant pages reload themselves
	// (a meta refresh): 1s to 1h. 0 means 5s; negative turns it off.
	Refresh time.Duration
	// Now is what ages are measured from. Nil means time.Now.
	Now func() time.Time
	// Logger receives failed store calls (warn). Nil means slog.Default().
	Logger *slog.Logger
	// Authorize, when not nil, is asked before every request: it names
	// the operator making r (recorded in the audit trail with each
	// action), or refuses r with an error, which is answered 401 and
	// reaches no page or action. Embedding the pages behind a service's
	// login is one line:
	//
	//	Authorize: func(r *http.Request) (string, error) { return myauth.User(r) }
	//
	// Nil: every request is served, and actions are recorded with the
	// operator "" (mount the handler behind the service's authentication).
	Authorize func(r *http.Request) (operator string, err error)
	// Challenge is the WWW-Authenticate header of a 401 (such as
	// `Basic realm="outbox"`, for a browser to ask for a password); ""
	// sends none.
	Challenge string
}

//go:embed templates/*.html
var templateFS embed.FS

var templates = template.Must(template.New("").Funcs(template.FuncMap{
	"count": Count,
	"age":   Age,
	"last":  func(ts []Tenant) string { return ts[len(ts)-1].Namespace },
	"deadrows": func(p page, rows []outbox.Row, ns string) deadRows {
		return deadRows{Page: p, Rows: rows, Namespace: ns}
	},
	"settings": func(s outbox.NamespaceSettings) string {
		if s.Fault != "" {
			return "cannot be applied: " + s.Fault
		}
		var parts []string
		if s.Paused {
			parts = append(parts, "paused")
		}
		if s.Quota != nil {
			parts = append(parts, "quota "+Count(*s.Quota))
		}
		if s.Weight != nil {
			parts = append(parts, "weight "+strconv.Itoa(*s.Weight))
		}
		if s.Rate != nil {
			parts = append(parts, "rate "+RateText(*s.Rate))
		}
		if s.AdaptivePin != nil {
			parts = append(parts, "adaptive ceiling pinned at "+strconv.Itoa(*s.AdaptivePin))
		}
		return strings.Join(parts, ", ")
	},
	"rate":     RateText,
	"adaptive": AdaptiveText,
	"lastid":   func(es []outbox.AuditEntry) int64 { return es[len(es)-1].ID },
	"maxaudit": func() int { return outbox.MaxAuditEntries },
	"rps":      func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) },
	"newest": func(reps []outbox.NodeReport) time.Time {
		var t time.Time
		for _, r := range reps {
			if r.ReportedAt.After(t) {
				t = r.ReportedAt
			}
		}
		return t
	},
	"capped": func(c bool) string {
		if c {
			return "≥ "
		}
		return ""
	},
}).ParseFS(templateFS, "templates/*.html"))

// handler is the http.Handler of NewHandler.
type handler struct {
	s       Store
	o       Options
	secret  []byte // keys the CSRF tokens
	mux     *http.ServeMux
	origins *http.CrossOriginProtection
}

// csrfCookie holds a random value per browser; a form's token is its HMAC
// under the handler's secret, so a page from another origin can neither
// read nor forge it (double submit, keyed).
const csrfCookie = "outbox_admin_csrf"

// NewHandler returns an http.Handler serving the admin pages of s, rooted
// at "/" (mount it with http.StripPrefix). Pages (GET): "/" the tenants
// (sortable by any column with ?sort=COLUMN&desc=1, refreshed live),
// "/tenant?ns=NAMESPACE" one tenant (its rows, shared settings, each live
// node's report of it, its dead letters), "/dead?ns=NAMESPACE&after=KEY"
// dead letters, "/nodes" the live nodes, "/audit?ns=NAMESPACE&before=ID"
// the audit trail, newest first. With Options.Actions, POSTs to
// "/dead/requeue", "/dead/purge", "/pause", "/resume", "/quota", "/rate"
// and "/reset" (every override removed: the code's configuration) act,
// each recorded in the store's audit trail with the operator
// Options.Authorize names,
// each checked against cross-origin requests and carrying a CSRF token
// from the page; they answer 303 to the page they came from, 403 for a
// missing or wrong token or when actions are off, 400 for bad input, and
// 500 when the store fails. An unknown path is 404, a method a path does
// not take 405. With Options.Authorize, a request it refuses is 401 and
// changes nothing; without it the handler has no authentication of its
// own: mount it behind the service's. It is safe for concurrent use.
func NewHandler(s Store, o Options) http.Handler {
	if o.Refresh == 0 {
		o.Refresh = 5 * time.Second
	}
	if o.Refresh > 0 {
		o.Refresh = min(max(o.Refresh, time.Second), time.Hour)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	h := &handler{s: s, o: o, secret: make([]byte, 32), mux: http.NewServeMux(), origins: http.NewCrossOriginProtection()}
	_, _ = rand.Read(h.secret) // crypto/rand.Read never fails
	h.mux.HandleFunc("GET /{$}", h.tenants)
	h.mux.HandleFunc("GET /tenant", h.tenant)
	h.mux.HandleFunc("GET /dead", h.dead)
	h.mux.HandleFunc("GET /payload", h.payload)
	h.mux.HandleFunc("GET /nodes", h.nodes)
	h.mux.HandleFunc("GET /audit", h.audit)
	for path, act := range map[string]func(http.ResponseWriter, *http.Request) error{
		"/dead/requeue": h.deadAction(Requeue),
		"/dead/purge":   h.deadAction(Purge),
		"/pause":        h.setting(func(r *http.Request, s *Setting) error { s.Pause = true; return nil }),
		"/resume":       h.setting(func(r *http.Request, s *Setting) error { s.Resume = true; return nil }),
		"/quota":        h.setting(parseQuota),
		"/rate":         h.setting(parseRate),
		"/reset":        h.setting(func(r *http.Request, s *Setting) error { s.Reset = true; return nil }),
	} {
		h.mux.Handle("POST "+path, h.origins.Handler(h.action(act)))
	}
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.o.Authorize != nil {
		name, err := h.o.Authorize(r)
		if err != nil {
			if h.o.Challenge != "" {
				w.Header().Set("WWW-Authenticate", h.o.Challenge)
			}
			http.Error(w, "admin: not authorised: "+err.Error(), http.StatusUnauthorized)
			return
		}
		r = r.WithContext(outbox.WithOperation(r.Context(), outbox.Operation{Operator: name}))
	}
	h.mux.ServeHTTP(w, r)
}

// token returns the request's CSRF token, setting the browser's cookie
// first if it has none.
func (h *handler) token(w http.ResponseWriter, r *http.Request) string {
	if !h.o.Actions {
		return ""
	}
	c, err := r.Cookie(csrfCookie)
	value := ""
	if err == nil && len(c.Value) >= 16 {
		value = c.Value
	} else {
		b := make([]byte, 18)
		_, _ = rand.Read(b)
		value = base64.RawURLEncoding.EncodeToString(b)
		http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: value, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	}
	return h.sign(value)
}

func (h *handler) sign(value string) string {
	m := hmac.New(sha256.New, h.secret)
	m.Write([]byte(value))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// badRequest is an action's error the user caused: 400.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

// action wraps a POST: actions on, a valid token, then act, then a 303
// back to the form's page.
func (h *handler) action(act func(http.ResponseWriter, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.o.Actions {
			http.Error(w, "admin: actions are disabled (admin.Options.Actions)", http.StatusForbidden)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
		if err := r.ParseForm(); err != nil {
			http.Error(w, "admin: "+err.Error(), http.StatusBadRequest)
			return
		}
		c, err := r.Cookie(csrfCookie)
		if err != nil || !hmac.Equal([]byte(r.PostForm.Get("csrf")), []byte(h.sign(c.Value))) {
			http.Error(w, "admin: missing or wrong CSRF token: reload the page and try again", http.StatusForbidden)
			return
		}
		if err := act(w, r); err != nil {
			var bad *badRequest
			var arg *outbox.ArgumentError
			switch {
			case errors.As(err, &bad), errors.As(err, &arg), errors.Is(err, backpressure.ErrInvalidConfig), errors.Is(err, backpressure.ErrInvalidRoute):
				http.Error(w, "admin: "+err.Error(), http.StatusBadRequest)
			default:
				h.o.Logger.Warn("admin: action failed", "path", r.URL.Path, "err", err)
				http.Error(w, "admin: "+err.Error(), http.StatusInternalServerError)
			}
			return
		}
		// Not http.Redirect: it makes a relative URL absolute from the
		// request's path, which lacks the prefix the handler is mounted
		// under; the browser resolves it against the URL it asked.
		w.Header().Set("Location", backTo(r.URL.Path, r.PostForm.Get("back")))
		w.WriteHeader(http.StatusSeeOther)
	})
}

func (h *handler) deadAction(act func(context.Context, Store, DeadSelection) (int, error)) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		// The checked rows (and the row whose button was pressed), or with
		// scope=ns every dead letter of ns, or with scope=all every one.
		var sel DeadSelection
		switch r.PostForm.Get("scope") {
		case "ns":
			if sel.Namespace = r.PostForm.Get("ns"); sel.Namespace == "" {
				return &badRequest{"scope ns without a namespace"}
			}
		case "all":
			sel.All = true
		case "":
			if sel.Keys = r.PostForm["key"]; len(sel.Keys) == 0 {
				return &badRequest{"no dead letters checked"}
			}
		default:
			return &badRequest{fmt.Sprintf("unknown scope %q", r.PostForm.Get("scope"))}
		}
		_, err := act(r.Context(), h.s, sel)
		return err
	}
}

func (h *handler) setting(change func(*http.Request, *Setting) error) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		s := Setting{Namespace: r.PostForm.Get("ns")}
		if err := change(r, &s); err != nil {
			return err
		}
		_, err := Apply(r.Context(), h.s, s)
		return err
	}
}

// parseRate reads the rate form: rate N/s, N/m, N/h, none, or default
// (clear the shared rate), and an optional burst.
func parseRate(r *http.Request, s *Setting) error {
	v := strings.TrimSpace(r.PostForm.Get("rate"))
	if v == "default" {
		s.ClearRate = true
		return nil
	}
	burst := 0
	if b := strings.TrimSpace(r.PostForm.Get("burst")); b != "" {
		n, err := strconv.Atoi(b)
		if err != nil {
			return &badRequest{fmt.Sprintf("burst %q is not a number", b)}
		}
		burst = n
	}
	rate, err := ParseRate(v, burst)
	if err != nil {
		return err
	}
	s.Rate = &rate
	return nil
}

func parseQuota(r *http.Request, s *Setting) error {
	v := strings.TrimSpace(r.PostForm.Get("quota"))
	switch v {
	case "":
		return &badRequest{"quota is empty: enter a number (0 or more), unlimited, or default to clear the shared quota"}
	case "default":
		s.ClearQuota = true
	case "unlimited":
		u := backpressure.Unlimited
		s.Quota = &u
	default:
		n, err := strconv.Atoi(v)
		if err != nil {
			return &badRequest{fmt.Sprintf("quota %q is not a number, unlimited or default", v)}
		}
		s.Quota = &n
	}
	return nil
}

// page is what every template gets.
type page struct {
	Title   string
	Now     time.Time
	Refresh int // seconds; 0 for none
	Actions bool
	CSRF    string
	Back    string // the page's own URL, relative, for actions to return to
	Data    any
}

func (h *handler) render(w http.ResponseWriter, r *http.Request, name, title string, refresh bool, data any) {
	p := page{Title: title, Now: h.o.Now(), Actions: h.o.Actions, CSRF: h.token(w, r), Back: "./" + strings.TrimPrefix(r.URL.Path, "/"), Data: data}
	if r.URL.RawQuery != "" {
		p.Back += "?" + r.URL.RawQuery
	}
	if refresh && h.o.Refresh > 0 && r.URL.Query().Get("refresh") != "0" {
		p.Refresh = int(h.o.Refresh / time.Second)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
	if err := templates.ExecuteTemplate(w, name, p); err != nil {
		h.o.Logger.Warn("admin: rendering failed", "page", name, "err", err)
	}
}

func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	var arg *outbox.ArgumentError
	if errors.As(err, &arg) {
		http.Error(w, "admin: "+err.Error(), http.StatusBadRequest)
		return
	}
	h.o.Logger.Warn("admin: store call failed", "path", r.URL.Path, "err", err)
	http.Error(w, "admin: "+err.Error(), http.StatusInternalServerError)
}

// tenantColumns are the tenants page's sortable columns.
var tenantColumns = map[string]func(a, b Tenant) int{
	"namespace": func(a, b Tenant) int { return cmp.Compare(a.Namespace, b.Namespace) },
	"quota":     func(a, b Tenant) int { return cmp.Compare(unl(a.Quota), unl(b.Quota)) },
	"weight":    func(a, b Tenant) int { return cmp.Compare(a.Weight, b.Weight) },
	"rate":      func(a, b Tenant) int { return cmp.Compare(rateOrder(a.Rate), rateOrder(b.Rate)) },
	"ceiling":   func(a, b Tenant) int { return cmp.Compare(unl(a.Ceiling), unl(b.Ceiling)) },
	"claimed":   func(a, b Tenant) int { return cmp.Compare(a.Rows.Claimed, b.Rows.Claimed) },
	"ready":     func(a, b Tenant) int { return cmp.Compare(a.Rows.Ready, b.Rows.Ready) },
	"scheduled": func(a, b Tenant) int { return cmp.Compare(a.Rows.Scheduled, b.Rows.Scheduled) },
	"dead":      func(a, b Tenant) int { return cmp.Compare(a.Rows.Dead, b.Rows.Dead) },
	"oldest":    func(a, b Tenant) int { return cmp.Compare(since(b.Rows.ReadySince), since(a.Rows.ReadySince)) },
	"held":      func(a, b Tenant) int { return cmp.Compare(a.Held, b.Held) },
	"reason":    func(a, b Tenant) int { return cmp.Compare(rankOf(a.Reason), rankOf(b.Reason)) },
}

// unl orders Unlimited (-1) above every number.
func unl(n int) int {
	if n == backpressure.Unlimited {
		return int(^uint(0) >> 1)
	}
	return n
}

// rateOrder orders no rate limit above every rate.
func rateOrder(r backpressure.Rate) float64 {
	if r.PerSecond == 0 {
		return math.Inf(1)
	}
	return r.PerSecond
}

// since orders times with the zero time (nothing ready) last.
func since(t time.Time) int64 {
	if t.IsZero() {
		return 1<<63 - 1
	}
	return t.UnixNano()
}

type tenantsData struct {
	Page TenantsPage
	// Rates are each tenant's rates from the history, by namespace;
	// Overview charts the whole outbox. History is false when the store
	// keeps none.
	Rates      map[string]TenantRates
	Overview   TenantRates
	History    bool
	Sort       string
	Desc       bool
	Columns    []string
	After, Ref string
}

func (h *handler) tenants(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p, err := TenantsParams{After: q.Get("after")}, error(nil)
	if l := q.Get("limit"); l != "" {
		if p.Limit, err = strconv.Atoi(l); err != nil {
			http.Error(w, "admin: limit is not a number", http.StatusBadRequest)
			return
		}
	}
	pg, err := Tenants(r.Context(), h.s, p)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	d := tenantsData{Page: pg, Sort: q.Get("sort"), Desc: q.Get("desc") == "1", After: p.After,
		Columns: []string{"namespace", "quota", "weight", "rate", "ceiling", "claimed", "ready", "scheduled", "dead", "oldest", "held", "reason"}}
	if err := d.addHistory(r.Context(), h.s, h.o.Now()); err != nil {
		h.fail(w, r, err)
		return
	}
	by, ok := tenantColumns[d.Sort]
	if !ok {
		d.Sort, by = "namespace", tenantColumns["namespace"]
	}
	slices.SortStableFunc(d.Page.Tenants, func(a, b Tenant) int {
		if d.Desc {
			return by(b, a)
		}
		return by(a, b)
	})
	h.render(w, r, "tenants.html", "Tenants", true, d)
}

type tenantData struct {
	Why     Explanation
	Dead    []outbox.Row
	History bool // the store keeps a history
	Rates   TenantRates
}

func (h *handler) tenant(w http.ResponseWriter, r *http.Request) {
	ns := r.URL.Query().Get("ns")
	if ns == "" {
		http.Error(w, "admin: ns is missing", http.StatusBadRequest)
		return
	}
	ex, err := Why(r.Context(), h.s, ns)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	dead, err := h.s.ListDead(r.Context(), outbox.ListDeadParams{Namespace: ns, Limit: 50})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	d := tenantData{Why: ex, Dead: dead}
	now := h.o.Now()
	_, hs, ok, err := historyOf(r.Context(), h.s, ns, now)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if d.History = ok; ok {
		var th TenantHistory
		if len(hs) == 1 {
			th = hs[0]
		}
		rows := ex.Tenant.Rows
		d.Rates = ratesOf("tenant", th, rows.Ready+rows.Scheduled+rows.Claimed, rows.Capped, now.Add(-ChartSpan), now, true)
	}
	h.render(w, r, "tenant.html", ns, true, d)
}

type deadData struct {
	Namespace, After string
	Faults           string // where Namespace's shared settings do not apply (NamespaceFaults)
	Rows             []outbox.Row
	Next             string // the After of the next page, "" for none
	// Groups are the dead letters by error, on the first page only.
	Groups *DeadGroupsResult
}

const deadPage = 100

// deadRows is the data of the "deadrows" template: a table of dead
// letters with its actions.
type deadRows struct {
	Page      page
	Rows      []outbox.Row
	Namespace string // the namespace shown, "" for all
}

func (h *handler) dead(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := deadData{Namespace: q.Get("ns"), After: q.Get("after")}
	rows, err := h.s.ListDead(r.Context(), outbox.ListDeadParams{Namespace: d.Namespace, After: d.After, Limit: deadPage})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	d.Rows = rows
	if d.Faults, err = faultsOf(r.Context(), h.s, d.Namespace); err != nil {
		h.fail(w, r, err)
		return
	}
	if len(rows) == deadPage {
		d.Next = rows[len(rows)-1].DispatchKey
	}
	if d.After == "" && len(rows) > 0 {
		g, err := DeadGroups(r.Context(), h.s, d.Namespace)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		d.Groups = &g
	}
	h.render(w, r, "dead.html", "Dead letters", false, d)
}

// payload serves GET /payload?key=KEY: one dead letter's payload.
func (h *handler) payload(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	if key == "" {
		http.Error(w, "admin: key is missing", http.StatusBadRequest)
		return
	}
	row, err := h.s.Get(r.Context(), key)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if row.State != outbox.StateDead {
		http.Error(w, "admin: "+key+" is not a dead letter", http.StatusNotFound)
		return
	}
	h.render(w, r, "payload.html", "Dead letter "+key, false, payloadOf(row))
}

type auditData struct {
	Namespace string
	Faults    string // where Namespace's shared settings do not apply (NamespaceFaults)
	Entries   []outbox.AuditEntry
	More      bool // a next page may follow: ?before= the last ID
}

const auditPage = 100

func (h *handler) audit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := outbox.AuditParams{Namespace: q.Get("ns"), Limit: auditPage}
	if b := q.Get("before"); b != "" {
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil {
			http.Error(w, "admin: before is not a number", http.StatusBadRequest)
			return
		}
		p.Before = n
	}
	es, err := h.s.Audit(r.Context(), p)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	faults, err := faultsOf(r.Context(), h.s, p.Namespace)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.render(w, r, "audit.html", "Audit trail", false, auditData{Namespace: p.Namespace, Faults: faults, Entries: es, More: len(es) == auditPage})
}

func (h *handler) nodes(w http.ResponseWriter, r *http.Request) {
	reps, err := h.s.NodeReports(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.render(w, r, "nodes.html", "Nodes", true, reps)
}

// backTo returns where an action at path returns to: back, a page's URL
// relative to the handler's root ("./dead?ns=a"), made relative to path
// (which the handler, mounted under a prefix it does not know, can only
// resolve relatively): "../dead?ns=a" from "/dead/requeue". Anything but
// a "./" URL on the handler's own pages goes back to the tenants page.
func backTo(path, back string) string {
	if !strings.HasPrefix(back, "./") || strings.Contains(back, "//") || strings.Contains(back, "..") || strings.ContainsAny(back, "\\\r\n") {
		back = "./"
	}
	if depth := strings.Count(path, "/") - 1; depth > 0 {
		return strings.Repeat("../", depth) + strings.TrimPrefix(back, "./")
	}
	return back
}
