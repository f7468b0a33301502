package server

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
)

// access is how an operation is guarded (DESIGN.md §7).
type access string

const (
	accessOpen  access = "open"  // liveness, readiness, the session route
	accessRead  access = "read"  // token needed only with auth_reads
	accessWrite access = "write" // a mutation: token (or loopback) needed, 403 when read_only
)

const (
	metaAccess   = "vigil-access"
	schemeBearer = "bearer"
	// SessionCookie is the dashboard's session cookie.
	SessionCookie = "vigil_session"
)

// The security requirements of the spec: reads take the token optionally,
// mutations require it, open routes need nothing.
var (
	securityOpen  = []map[string][]string{{}}
	securityRead  = []map[string][]string{{}, {schemeBearer: {}}}
	securityWrite = []map[string][]string{{schemeBearer: {}}}
)

// credential is how a request authenticated itself.
type credential int

const (
	credNone credential = iota
	credBearer
	credCookie
)

// authMiddleware enforces DESIGN.md §7 per operation, before any input is
// read.
func (s *server) authMiddleware(api huma.API) func(huma.Context, func(huma.Context)) {
	return func(ctx huma.Context, next func(huma.Context)) {
		a, _ := ctx.Operation().Metadata[metaAccess].(access)
		if a == accessOpen || a == "" {
			next(ctx)
			return
		}
		r, _ := humago.Unwrap(ctx)
		if status, msg := s.authorize(r, a); status != 0 {
			if status == http.StatusUnauthorized {
				ctx.SetHeader("WWW-Authenticate", `Bearer realm="vigil"`)
			}
			_ = huma.WriteErr(api, ctx, status, msg)
			return
		}
		next(ctx)
	}
}

// authorize returns 0 when r may run an operation guarded by a, else the
// status and the reason.
func (s *server) authorize(r *http.Request, a access) (int, string) {
	if a == accessWrite && s.cfg.ReadOnly {
		return http.StatusForbidden, "this admin server is read-only (read_only: true)"
	}
	if s.cfg.Token == "" {
		// No token configured: everything from loopback clients, decided per
		// request; reads from anywhere unless auth_reads.
		if a == accessRead && !s.cfg.AuthReads {
			return 0, ""
		}
		if !loopback(r) {
			return http.StatusForbidden, "no token is configured: this is accepted only from loopback clients"
		}
		if a == accessWrite && crossSite(r) {
			return http.StatusForbidden, "cross-site request refused (Sec-Fetch-Site)"
		}
		return 0, ""
	}
	cred := s.credential(r)
	if cred == credNone {
		if a == accessRead && !s.cfg.AuthReads {
			return 0, ""
		}
		if _, ok := r.Header["Authorization"]; ok {
			return http.StatusUnauthorized, "wrong token"
		}
		return http.StatusUnauthorized, "a bearer token is required (Authorization: Bearer <token>)"
	}
	if a == accessWrite && cred == credCookie && crossSite(r) {
		return http.StatusForbidden, "cookie-authenticated mutations must come from the same origin (Sec-Fetch-Site)"
	}
	return 0, ""
}

// credential checks the bearer token, else the session cookie. A wrong
// Authorization header is not rescued by a cookie.
func (s *server) credential(r *http.Request) credential {
	if h, ok := r.Header["Authorization"]; ok {
		if len(h) == 1 {
			if tok, ok := cutBearer(h[0]); ok && s.tokenOK(tok) {
				return credBearer
			}
		}
		return credNone
	}
	if c, err := r.Cookie(SessionCookie); err == nil && s.sessionOK(c.Value) {
		return credCookie
	}
	return credNone
}

func cutBearer(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	return strings.TrimSpace(tok), true
}

// tokenOK compares in constant time (hashing first, so that the length of
// the token does not show either).
func (s *server) tokenOK(tok string) bool {
	a, b := sha256.Sum256([]byte(tok)), sha256.Sum256([]byte(s.cfg.Token))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1 && s.cfg.Token != ""
}

// The session cookie is "<expiry unix s>.<hex HMAC-SHA256(token, expiry)>":
// stateless, valid on every host that shares the token, void once the token
// changes or the expiry passes.
func (s *server) sessionValue(exp time.Time) string {
	e := strconv.FormatInt(exp.Unix(), 10)
	return e + "." + s.sessionMAC(e)
}

func (s *server) sessionMAC(exp string) string {
	m := hmac.New(sha256.New, []byte(s.cfg.Token))
	m.Write([]byte("vigil session\x00" + exp))
	return hex.EncodeToString(m.Sum(nil))
}

func (s *server) sessionOK(v string) bool {
	if s.cfg.Token == "" || len(v) > 128 {
		return false
	}
	e, mac, ok := strings.Cut(v, ".")
	if !ok {
		return false
	}
	n, err := strconv.ParseInt(e, 10, 64)
	if err != nil || !s.cfg.Clock.Now().Before(time.Unix(n, 0)) {
		return false
	}
	return hmac.Equal([]byte(mac), []byte(s.sessionMAC(e)))
}

// loopback reports whether the client connected from a loopback address.
func loopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// crossSite reports a request that a browser marked as not same-origin;
// without the header (not a browser, or an old one) it passes.
func crossSite(r *http.Request) bool {
	v, ok := r.Header["Sec-Fetch-Site"]
	return ok && (len(v) != 1 || v[0] != "same-origin")
}
