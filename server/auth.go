package server

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
)

// access is how an operation is guarded (docs/design.md §7).
type access string

const (
	accessOpen  access = "open"  // liveness, readiness
	accessRead  access = "read"  // token needed only with auth_reads
	accessWrite access = "write" // a mutation: token (or this host) needed, 403 when read_only
	// The session route: open with a token (it checks the token itself,
	// throttled), from this host only without one.
	accessSession access = "session"
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

// FailedLoginBurst is how many wrong tokens a client may send in a row;
// then one more per FailedLoginEvery, the others answered 429.
const (
	FailedLoginBurst = 10
	FailedLoginEvery = 10 * time.Second
)

// credential is how a request authenticated itself.
type credential int

const (
	credNone credential = iota
	credBearer
	credCookie
)

// reqInfo is what the session handlers need of the request (Huma hands
// them only their input).
type reqInfo struct {
	client string
	https  bool
	cookie string
}

type reqInfoKey struct{}

func requestInfo(ctx context.Context) reqInfo {
	ri, _ := ctx.Value(reqInfoKey{}).(reqInfo)
	return ri
}

// noTokenRefusal is the 403 of a mutation without a token from elsewhere
// than this host.
const noTokenRefusal = "no token is configured, so mutations are accepted only from this host: a loopback client, " +
	"with a Host header naming a loopback address, localhost or the listen address, and no Forwarded, " +
	"X-Forwarded-For or X-Real-IP header. Set a token (token, VIGIL_TOKEN or VIGIL_TOKEN_FILE) to act from elsewhere"

// refusal is why a request may not run an operation.
type refusal struct {
	status int
	msg    string
	wait   time.Duration // 429: Retry-After
}

// authMiddleware enforces docs/design.md §7 per operation, before any input is
// read.
func (s *server) authMiddleware(api huma.API) func(huma.Context, func(huma.Context)) {
	return func(ctx huma.Context, next func(huma.Context)) {
		a, _ := ctx.Operation().Metadata[metaAccess].(access)
		if a == accessOpen || a == "" {
			next(ctx)
			return
		}
		r, _ := humago.Unwrap(ctx)
		if f := s.authorize(r, a); f != nil {
			switch f.status {
			case http.StatusUnauthorized:
				ctx.SetHeader("WWW-Authenticate", `Bearer realm="vigil"`)
			case http.StatusTooManyRequests:
				ctx.SetHeader("Retry-After", retryAfter(f.wait))
			}
			_ = huma.WriteErr(api, ctx, f.status, f.msg)
			return
		}
		if a == accessSession {
			ri := reqInfo{client: s.clientAddr(r), https: s.overHTTPS(r)}
			if c, err := r.Cookie(SessionCookie); err == nil {
				ri.cookie = c.Value
			}
			ctx = huma.WithValue(ctx, reqInfoKey{}, ri)
		}
		next(ctx)
	}
}

// refuse writes f as a problem detail (for handlers outside Huma).
func (s *server) refuse(w http.ResponseWriter, f *refusal) {
	switch f.status {
	case http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="vigil"`)
	case http.StatusTooManyRequests:
		w.Header().Set("Retry-After", retryAfter(f.wait))
	}
	writeProblem(w, f.status, f.msg)
}

// authorize returns nil when r may run an operation guarded by a, else why
// not.
func (s *server) authorize(r *http.Request, a access) *refusal {
	if a == accessWrite && s.cfg.ReadOnly {
		return &refusal{status: http.StatusForbidden, msg: "this admin server is read-only (read_only: true)"}
	}
	if s.cfg.Token == "" {
		// No token configured: reads from anywhere unless auth_reads, the
		// rest only from this host (decided per request).
		if a == accessRead && !s.cfg.AuthReads {
			return nil
		}
		if !s.fromThisHost(r) {
			return &refusal{status: http.StatusForbidden, msg: noTokenRefusal}
		}
		if a != accessRead {
			if ok, why := sameOrigin(r, false); !ok {
				return &refusal{status: http.StatusForbidden, msg: why}
			}
		}
		return nil
	}
	now := s.cfg.Clock.Now()
	_, hasAuth := r.Header["Authorization"]
	if hasAuth || (a == accessSession && r.Method == http.MethodPost) {
		if d := s.logins.wait(s.clientAddr(r), now); d > 0 {
			return &refusal{status: http.StatusTooManyRequests, wait: d,
				msg: "too many wrong tokens from this client: try again in " + retryAfter(d) + " s"}
		}
	}
	if a == accessSession {
		return nil
	}
	cred := s.credential(r)
	if cred == credNone {
		if a == accessRead && !s.cfg.AuthReads {
			return nil
		}
		if hasAuth {
			s.logins.failed(s.clientAddr(r), "bearer", now)
			return &refusal{status: http.StatusUnauthorized, msg: "wrong token"}
		}
		return &refusal{status: http.StatusUnauthorized, msg: "a bearer token is required (Authorization: Bearer <token>)"}
	}
	if a == accessWrite && cred == credCookie {
		if ok, why := sameOrigin(r, true); !ok {
			return &refusal{status: http.StatusForbidden, msg: why}
		}
	}
	return nil
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
	if c, err := r.Cookie(SessionCookie); err == nil && s.sessionOK(r.Context(), c.Value) {
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

// The session cookie is "<expiry unix s>.<nonce>.<hex HMAC-SHA256(token,
// expiry and nonce)>": void once the token changes or the expiry passes,
// and revocable: it is valid only while Keys.Session(nonce) exists in
// Redis, on every host that shares the token and the Redis.
func (s *server) sessionValue(exp time.Time, nonce string) string {
	e := strconv.FormatInt(exp.Unix(), 10) + "." + nonce
	return e + "." + s.sessionMAC(e)
}

func (s *server) sessionMAC(expNonce string) string {
	m := hmac.New(sha256.New, []byte(s.cfg.Token))
	m.Write([]byte("vigil session\x00" + expNonce))
	return hex.EncodeToString(m.Sum(nil))
}

// sessionNonce checks v's form, expiry and MAC and returns its nonce.
func (s *server) sessionNonce(v string) (string, bool) {
	if s.cfg.Token == "" || len(v) > 160 {
		return "", false
	}
	i := strings.LastIndexByte(v, '.')
	if i < 0 {
		return "", false
	}
	expNonce, mac := v[:i], v[i+1:]
	e, nonce, ok := strings.Cut(expNonce, ".")
	if !ok || len(nonce) != 32 || strings.Trim(nonce, "0123456789abcdef") != "" {
		return "", false
	}
	n, err := strconv.ParseInt(e, 10, 64)
	if err != nil || !s.cfg.Clock.Now().Before(time.Unix(n, 0)) {
		return "", false
	}
	if !hmac.Equal([]byte(mac), []byte(s.sessionMAC(expNonce))) {
		return "", false
	}
	return nonce, true
}

func (s *server) sessionOK(ctx context.Context, v string) bool {
	nonce, ok := s.sessionNonce(v)
	if !ok {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, ReadyTimeout)
	defer cancel()
	n, err := s.store.Client().Exists(ctx, s.store.Keys().Session(nonce)).Result()
	return err == nil && n == 1
}
