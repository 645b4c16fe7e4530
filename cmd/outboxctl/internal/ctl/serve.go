package ctl

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/outboxkit/backpressure/admin"
	"github.com/outboxkit/backpressure/outbox"
)

// The environment variables serve reads credentials from when no file
// is given.
const (
	tokenEnv = "OUTBOXCTL_TOKEN"
	basicEnv = "OUTBOXCTL_BASIC_AUTH"
)

const serveDoc = `Serve the admin pages over HTTP, read-only unless -actions.

It listens on loopback (127.0.0.1:8080) by default. An address off loopback, and -actions on any
address, need credentials, read from a file or the environment (never a flag value, which ps shows):
a token (-token-file FILE or $` + tokenEnv + `), sent as the cookie the URL ?token=TOKEN sets or as
"Authorization: Bearer TOKEN"; or basic auth (-basic-auth-file FILE or $` + basicEnv + `, holding
USER:PASSWORD). With -actions on loopback and none given, serve makes a random token at start and
prints a URL that carries it. Changes are recorded in the audit trail under the basic-auth user,
or for a token under -as (its holder: default the OS user). A request without valid credentials
is 401 and changes nothing.`

// creds are serve's credentials: a token, or a basic-auth user and
// password, or none. Each is kept as its SHA-256, compared in constant
// time.
type creds struct {
	token      [32]byte
	hasToken   bool
	made       bool // the token was made at start (printed in the URL)
	user, pass [32]byte
	hasBasic   bool
	userName   string
}

func (c creds) any() bool { return c.hasToken || c.hasBasic }

// secret reads a credential from file, else from the environment
// variable env; "" when neither gives one. A file that is empty or
// cannot be read is an error.
func secret(file, env string) (string, error) {
	if file == "" {
		return strings.TrimSpace(os.Getenv(env)), nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("%s is empty", file)
	}
	return v, nil
}

// loadCreds reads serve's credentials and decides whether it needs them:
// off loopback, or with -actions. A token is made for -actions on
// loopback when none is given; off loopback without credentials it
// refuses to start.
func loadCreds(a *cmdArgs, loopback bool) (creds, string, error) {
	var c creds
	token, err := secret(a.tokenFile, tokenEnv)
	if err != nil {
		return c, "", usagef("serve: -token-file: %v", err)
	}
	basic, err := secret(a.basicFile, basicEnv)
	if err != nil {
		return c, "", usagef("serve: -basic-auth-file: %v", err)
	}
	if basic != "" {
		user, pass, ok := strings.Cut(basic, ":")
		if !ok || user == "" || pass == "" {
			return c, "", usagef("serve: basic auth: want USER:PASSWORD")
		}
		c.user, c.pass, c.hasBasic, c.userName = sha256.Sum256([]byte(user)), sha256.Sum256([]byte(pass)), true, user
	}
	if token != "" {
		c.token, c.hasToken = sha256.Sum256([]byte(token)), true
	}
	if c.any() || (loopback && !a.actions) {
		return c, "", nil
	}
	if !loopback {
		return c, "", usagef("serve: -addr %s is not loopback: give credentials (-token-file, $%s, -basic-auth-file or $%s)", display(a.addr), tokenEnv, basicEnv)
	}
	b := make([]byte, 24)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	token = base64.RawURLEncoding.EncodeToString(b)
	c.token, c.hasToken, c.made = sha256.Sum256([]byte(token)), true, true
	return c, token, nil
}

// isLoopback reports whether addr's host is a loopback address or
// "localhost"; "" (every interface) is not.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// guard is serve's authentication in front of the admin handler: it
// turns a valid ?token= into a cookie and redirects to the URL without
// it, and names the operator of a request for admin.Options.Authorize.
type guard struct {
	c      creds
	as     string // the token holder's name
	cookie string // the cookie's name, by port: two serves on one host keep theirs
}

func (g guard) tokenOK(v string) bool {
	sum := sha256.Sum256([]byte(v))
	return g.c.hasToken && subtle.ConstantTimeCompare(sum[:], g.c.token[:]) == 1
}

// authorize names the operator of r, or refuses it.
func (g guard) authorize(r *http.Request) (string, error) {
	if !g.c.any() {
		return "", nil
	}
	if ck, err := r.Cookie(g.cookie); err == nil && g.tokenOK(ck.Value) {
		return g.as, nil
	}
	if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && g.tokenOK(v) {
		return g.as, nil
	}
	if user, pass, ok := r.BasicAuth(); ok && g.c.hasBasic {
		u, p := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(pass))
		if subtle.ConstantTimeCompare(u[:], g.c.user[:])&subtle.ConstantTimeCompare(p[:], g.c.pass[:]) == 1 {
			return user, nil
		}
	}
	return "", errors.New("give the token (the URL serve printed, or Authorization: Bearer) or basic-auth credentials")
}

// wrap handles ?token=: a valid one becomes the cookie (HttpOnly,
// SameSite=Strict) and the answer a 303 to the same URL without it; a
// wrong one is 401.
func (g guard) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if !q.Has("token") {
			next.ServeHTTP(w, r)
			return
		}
		if !g.tokenOK(q.Get("token")) {
			http.Error(w, "outboxctl: wrong token", http.StatusUnauthorized)
			return
		}
		http.SetCookie(w, &http.Cookie{Name: g.cookie, Value: q.Get("token"), Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
		q.Del("token")
		u := url.URL{Path: r.URL.Path, RawQuery: q.Encode()}
		w.Header().Set("Location", u.String())
		w.WriteHeader(http.StatusSeeOther)
	})
}

func serve(ctx context.Context, c Config, s admin.Store, a *cmdArgs) error {
	loopback := isLoopback(a.addr)
	cr, token, err := loadCreds(a, loopback)
	if err != nil {
		return err
	}
	listen := c.Listen
	if listen == nil {
		listen = net.Listen
	}
	l, err := listen("tcp", a.addr)
	if err != nil {
		return err
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	g := guard{c: cr, as: asOf(ctx), cookie: "outboxctl_token_" + port}
	o := admin.Options{Actions: a.actions, Now: c.Now}
	if cr.any() {
		o.Authorize = g.authorize
		if cr.hasBasic {
			o.Challenge = `Basic realm="outboxctl"`
		}
	}
	srv := &http.Server{Handler: g.wrap(admin.NewHandler(s, o)), ReadHeaderTimeout: 10 * time.Second}
	where := fmt.Sprintf("http://%s/", l.Addr())
	switch {
	case cr.made:
		fmt.Fprintf(c.Stderr, "outboxctl: serving the admin pages (actions %v); open, with the token made at start:\n    %s?token=%s\n", a.actions, where, token)
	case cr.any():
		fmt.Fprintf(c.Stderr, "outboxctl: serving the admin pages on %s (actions %v; credentials required)\n", where, a.actions)
	default:
		fmt.Fprintf(c.Stderr, "outboxctl: serving the admin pages on %s (read-only, loopback, no credentials)\n", where)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return srv.Shutdown(shut)
	}
}

// asOf is the operator ctx names (-as).
func asOf(ctx context.Context) string { return outbox.OperationFrom(ctx).Operator }
