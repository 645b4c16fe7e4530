package dispatch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxkit/backpressure"
	"github.com/outboxkit/backpressure/outbox"
)

// Errors of a [Service]'s lifecycle.
var (
	// ErrServiceStarted reports a Start of a Service already started (and
	// not stopped since).
	ErrServiceStarted = errors.New("dispatch: service already started")
	// ErrServiceNotStarted reports a Stop of a Service that is not
	// running: never started, its Start failed, or already stopped.
	ErrServiceNotStarted = errors.New("dispatch: service not started")
)

// Cluster is how a [Service] joins the set of dispatcher nodes that share
// a store, each claiming on the shards it owns. pgstore's Store.Cluster is
// one; a Service without a Cluster is the only node and owns every shard
// (sqlitestore, or one PostgreSQL dispatcher).
type Cluster interface {
	// Join adds the node named node (1 to 255 bytes of valid UTF-8
	// without NUL) to the cluster and returns its membership, with its
	// first ownership known. An error leaves nothing running.
	Join(ctx context.Context, node string) (Member, error)
}

// Member is one node's membership of a [Cluster], from Join to Leave. Its
// methods are safe for concurrent use.
type Member interface {
	// Node returns the node's name.
	Node() string
	// Store returns the store the node claims through: fenced to the
	// shards it owns, where the cluster fences claims.
	Store() Store
	// Owned returns the shards the node owns now.
	Owned() backpressure.OwnedShardFraction
	// Changes receives the owned set each time it changes; it holds the
	// newest unread set and is never closed.
	Changes() <-chan backpressure.OwnedShardFraction
	// LeaseExpiresAt returns when the node's membership lease may lapse
	// unless renewed: the instant from which Owned may no longer be true.
	// The zero time means no live lease (before the first heartbeat was
	// confirmed, once it lapsed, after Leave).
	LeaseExpiresAt() time.Time
	// Leave hands the node's shards over and ends the membership.
	Leave(ctx context.Context) error
}

// ServiceOptions configures a [Service]. Options.Workers and
// Planner.BatchSize are required; every other zero field takes the
// default its comment names.
type ServiceOptions struct {
	// Planner is the Backpressure's configuration (see
	// [backpressure.New]): batch size, quotas, weights, rates.
	Planner backpressure.Config

	// Options are the Dispatcher's (see [New]). A non-nil Operate with
	// Node "" gets the service's node name.
	Options

	// Cluster, when not nil, is joined at Start and left at Stop, and the
	// Service claims through the member's store on the shards it owns,
	// following their changes. Nil: the Service is the only node and owns
	// every shard of the store, which must then have a ShardCount() int
	// method (sqlitestore's and pgstore's stores have).
	Cluster Cluster

	// Node names this node, to the Cluster and in Operate's reports.
	// Default: the host name, the process id and a random suffix
	// ("web-7-1234-9f3a01bc"), unique across processes and restarts: in a
	// container every process may be pid 1 on a host name that survives
	// a restart, and a name still held by a dead node's lease could not
	// join until it lapsed.
	Node string

	// LiveTimeout is how long the sweep loop may go without completing a
	// sweep (failed or not) while a worker is idle before [Service.Live]
	// reports the service not live. Default: the larger of 10 ×
	// Options.PollInterval and 2 × Options.ErrorBackoff.Max (their zero
	// values read as their defaults, 1s and 30s: so 60s), so that neither
	// an idle poll nor a failing store's backoff counts as wedged.
	LiveTimeout time.Duration

	// PingTimeout bounds each store ping: Start's and Ready's. Default 5s.
	PingTimeout time.Duration

	// StopTimeout is [Service.Run]'s deadline for Stop. Default:
	// Options.ShutdownTimeout, or its default (10s).
	StopTimeout time.Duration
}

// Defaults of ServiceOptions, and of the Options it reads them from.
const (
	defaultPingTimeout     = 5 * time.Second
	defaultShutdownTimeout = 10 * time.Second // Options.ShutdownTimeout's default
	defaultErrorBackoffMax = 30 * time.Second // Options.ErrorBackoff.Max's default
	leaveTimeout           = 10 * time.Second // Stop's bound on Member.Leave
)

// Service owns a dispatcher's lifecycle, the dozen lines every dispatcher
// main would otherwise write: Start pings the store (failing fast when it
// is unreachable), joins the Cluster under a unique node name, builds the
// Backpressure on the shards the node owns, follows their changes and runs
// the Dispatcher; Stop stops claiming, lets running handlers finish until
// its ctx is done, then cancels them, and leaves the Cluster. Live, Ready
// and their http.Handlers report its health at a cost independent of the
// outbox's size (see [Service.Live], [Service.Ready]).
//
//	svc, err := dispatch.NewService(store, mux.HandleRow, dispatch.ServiceOptions{
//		Planner: backpressure.Config{BatchSize: 100, DefaultQuota: 10},
//		Options: dispatch.Options{Workers: 16},
//	})
//	…
//	err = svc.Run(ctx) // ctx from signal.NotifyContext: Start, wait for SIGTERM, Stop
//
// Build it with [NewService]; the zero value is not usable. Its methods
// are safe for concurrent use. After Stop returns it may be started again.
type Service struct {
	store   Store
	handler Handler
	opts    ServiceOptions
	node    string
	log     *slog.Logger
	watch   *sweepWatch
	busy    atomic.Int64 // handlers running

	mu    sync.Mutex
	state serviceState
	run   *serviceRun // while running or stopping
}

type serviceState int

const (
	serviceIdle serviceState = iota
	serviceStarting
	serviceRunning
	serviceStopping
)

// serviceRun is what one Start built, for its Stop.
type serviceRun struct {
	member     Member // nil without a Cluster
	bp         *backpressure.Backpressure
	stopRun    context.CancelFunc // ends Dispatcher.Run's ctx: no more claims
	cancelWork context.CancelFunc // cancels the running handlers' ctx
	workCtx    context.Context
	runDone    chan struct{}
	runErr     error // set before runDone closes
	followDone chan struct{}
}

// NewService returns a Service that runs handler over store's rows. It
// checks every option as [New] and [backpressure.New] do, without I/O, and
// returns their errors: an *[OptionError] (matching [ErrInvalidOptions])
// for a nil store or handler, a bad option, a negative LiveTimeout,
// PingTimeout or StopTimeout, or a store without ShardCount and no
// Cluster; the planner's error for a bad Planner.
func NewService(store Store, handler Handler, opts ServiceOptions) (*Service, error) {
	if store == nil || isNilValue(store) {
		return nil, &OptionError{Field: "store", Reason: "is nil"}
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"LiveTimeout", opts.LiveTimeout}, {"PingTimeout", opts.PingTimeout}, {"StopTimeout", opts.StopTimeout}} {
		if d.v < 0 {
			return nil, &OptionError{Field: d.field, Reason: fmt.Sprintf("is %v, negative", d.v)}
		}
	}
	shards, err := serviceShards(store, opts.Cluster)
	if err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	s := &Service{store: store, handler: handler, opts: opts, node: opts.Node, log: opts.Logger}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.watch = newSweepWatch(opts.Metrics)
	// A trial build, so that every option is checked now; Start builds
	// the real ones on the shards the node owns.
	if _, _, err := s.build(store, shards, context.Background()); err != nil {
		return nil, err
	}
	return s, nil
}

// serviceShards returns every shard of store for a service without a
// Cluster, and a stand-in for one with a Cluster (Start uses the member's).
func serviceShards(store Store, c Cluster) (backpressure.OwnedShardFraction, error) {
	sc, ok := store.(interface{ ShardCount() int })
	if !ok {
		if c == nil {
			return backpressure.OwnedShardFraction{}, &OptionError{Field: "store",
				Reason: fmt.Sprintf("(%T) has no ShardCount() int method: without a Cluster the service owns every shard and needs their count", store)}
		}
		return backpressure.AllShards(1)
	}
	f, err := backpressure.AllShards(sc.ShardCount())
	if err != nil {
		return f, &OptionError{Field: "store", Reason: fmt.Sprintf("ShardCount() is %d: %v", sc.ShardCount(), err)}
	}
	return f, nil
}

// withDefaults fills in ServiceOptions' own defaults.
func (o ServiceOptions) withDefaults() ServiceOptions {
	if o.Node == "" {
		o.Node = defaultNode()
	}
	if o.Operate != nil && o.Operate.Node == "" {
		op := *o.Operate
		op.Node = o.Node
		o.Operate = &op
	}
	if o.PingTimeout == 0 {
		o.PingTimeout = defaultPingTimeout
	}
	if o.StopTimeout == 0 {
		o.StopTimeout = cmpOr(o.ShutdownTimeout, defaultShutdownTimeout)
	}
	if o.LiveTimeout == 0 {
		o.LiveTimeout = max(10*cmpOr(o.PollInterval, defaultPollInterval), 2*cmpOr(o.ErrorBackoff.Max, defaultErrorBackoffMax))
	}
	return o
}

func cmpOr(d, dflt time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return dflt
}

// defaultNode is host-pid-random.
func defaultNode() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "node"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%.200s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// build returns the Backpressure and the Dispatcher over store on shards,
// whose handlers' ctx is cancelled when work is.
func (s *Service) build(store Store, shards backpressure.OwnedShardFraction, work context.Context) (*backpressure.Backpressure, *Dispatcher, error) {
	bp, err := backpressure.New(s.opts.Planner, shards)
	if err != nil {
		return nil, nil, err
	}
	o := s.opts.Options
	o.Metrics = s.watch.metrics()
	o.Logger = s.log
	d, err := New(bp, store, s.wrap(s.handler, work), o)
	if err != nil {
		return nil, nil, err
	}
	return bp, d, nil
}

// wrap counts the running handlers, for Live, and cancels a handler's ctx
// when work is (Stop's deadline passed).
func (s *Service) wrap(h Handler, work context.Context) Handler {
	if h == nil {
		return nil // New refuses it
	}
	return func(ctx context.Context, row outbox.Row) error {
		s.busy.Add(1)
		defer s.busy.Add(-1)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(work, cancel)()
		return h(ctx, row)
	}
}

// Node returns the node's name: ServiceOptions.Node or its default.
func (s *Service) Node() string { return s.node }

// Backpressure returns the planner the running service sweeps with (to
// SetConfig it, or read its plans), or nil when it is not running.
func (s *Service) Backpressure() *backpressure.Backpressure {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run == nil {
		return nil
	}
	return s.run.bp
}

// Start starts the service, and returns once it is dispatching: it pings
// the store if it is an [outbox.Pinger] (bounded by PingTimeout; an
// unreachable store fails Start at once with the ping's error, wrapped),
// joins the Cluster if there is one, builds the Backpressure on the owned
// shards, and starts following their changes and the Dispatcher's Run in
// the background. ctx bounds the start-up only: the service runs until
// Stop. A Start that fails leaves nothing running (it left the Cluster)
// and may be tried again; Start on a started service returns
// [ErrServiceStarted].
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.state != serviceIdle {
		s.mu.Unlock()
		return ErrServiceStarted
	}
	s.state = serviceStarting
	s.mu.Unlock()
	r, err := s.start(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.state = serviceIdle
		return err
	}
	s.run, s.state = r, serviceRunning
	return nil
}

// start pings, joins and builds; nothing runs yet.
func (s *Service) start(ctx context.Context) (*serviceRun, error) {
	if err := s.ping(ctx); err != nil {
		return nil, fmt.Errorf("dispatch: Service.Start: store unreachable: %w", err)
	}
	r := &serviceRun{runDone: make(chan struct{}), followDone: make(chan struct{})}
	store, shards := s.store, backpressure.OwnedShardFraction{}
	if c := s.opts.Cluster; c != nil {
		m, err := c.Join(ctx, s.node)
		if err != nil {
			return nil, fmt.Errorf("dispatch: Service.Start: join as %q: %w", s.node, err)
		}
		r.member, store, shards = m, m.Store(), m.Owned()
	} else {
		var err error
		if shards, err = serviceShards(s.store, nil); err != nil {
			return nil, err
		}
	}
	r.workCtx, r.cancelWork = context.WithCancel(context.Background())
	bp, d, err := s.build(store, shards, r.workCtx)
	if err != nil {
		r.cancelWork()
		_ = s.leave(r)
		return nil, err
	}
	r.bp = bp
	runCtx, stopRun := context.WithCancel(context.Background())
	r.stopRun = stopRun
	s.watch.reset(time.Now())
	go func() {
		defer close(r.runDone)
		r.runErr = d.Run(runCtx)
	}()
	go func() {
		defer close(r.followDone)
		s.follow(runCtx, r)
	}()
	return r, nil
}

// follow applies the member's owned shards to bp until ctx is done.
func (s *Service) follow(ctx context.Context, r *serviceRun) {
	if r.member == nil {
		return
	}
	apply := func(f backpressure.OwnedShardFraction) {
		if err := r.bp.SetOwnedShards(f); err != nil {
			s.log.Error("dispatch: service: applying the owned shards failed", "node", s.node, "err", err)
		}
	}
	apply(r.member.Owned()) // it may have changed since Join
	for {
		select {
		case <-ctx.Done():
			return
		case f := <-r.member.Changes():
			apply(f)
		}
	}
}

// Stop stops the service: no more claims; the running handlers get until
// ctx is done to finish (their results are written), then their ctx is
// cancelled and Stop waits for the Dispatcher's Run to return (a handler
// that ignores its ctx is abandoned at Options.ShutdownTimeout after Stop
// began, its row coming back when its lease expires); then it leaves the
// Cluster (bounded by 10s of its own, since ctx may be done by then).
//
// It returns nil after a clean stop; else the errors joined: one matching
// ctx's error (context.DeadlineExceeded, say) when it had to cancel
// running handlers, the Run's *[ShutdownError] when rows were abandoned or
// results unwritten, and Leave's error. Stop on a service that is not
// running returns [ErrServiceNotStarted].
func (s *Service) Stop(ctx context.Context) error {
	s.mu.Lock()
	if s.state != serviceRunning {
		s.mu.Unlock()
		return ErrServiceNotStarted
	}
	s.state = serviceStopping
	r := s.run
	s.mu.Unlock()

	var errs []error
	r.stopRun()
	select {
	case <-r.runDone:
	case <-ctx.Done():
		n := s.busy.Load()
		r.cancelWork()
		<-r.runDone
		if n > 0 {
			errs = append(errs, fmt.Errorf("dispatch: Service.Stop: cancelled %d running handlers: %w", n, ctx.Err()))
		}
	}
	r.cancelWork()
	<-r.followDone
	errs = append(errs, r.runErr)
	if err := s.leave(r); err != nil {
		errs = append(errs, fmt.Errorf("dispatch: Service.Stop: leave: %w", err))
	}
	s.mu.Lock()
	s.run, s.state = nil, serviceIdle
	s.mu.Unlock()
	return errors.Join(errs...)
}

// leave leaves r's Cluster, if it joined one, within leaveTimeout.
func (s *Service) leave(r *serviceRun) error {
	if r.member == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
	defer cancel()
	return r.member.Leave(ctx)
}

// Run starts the service, runs it until ctx is done, and stops it with a
// deadline of StopTimeout: Start, then Stop. It returns Start's error, or
// Stop's (nil after a clean stop).
func (s *Service) Run(ctx context.Context) error {
	if err := s.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.StopTimeout)
	defer cancel()
	return s.Stop(stopCtx)
}
