package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
)

// SessionRequest exchanges the token for the dashboard's cookie.
type SessionRequest struct {
	Token string `json:"token" maxLength:"4096" doc:"The admin token"`
}

// SessionInput is the session operation's input.
type SessionInput struct {
	Body SessionRequest
}

// Session describes the dashboard's session.
type Session struct {
	Authenticated bool  `json:"authenticated" doc:"Whether the cookie now authenticates this browser"`
	AuthRequired  bool  `json:"auth_required" doc:"Whether this server has a token at all (without one, the dashboard needs no session)"`
	ExpiresAt     int64 `json:"expires_at,omitempty" doc:"When the session ends (Unix ms)"`
}

// SessionOutput sets or clears the cookie.
type SessionOutput struct {
	SetCookie string `header:"Set-Cookie" doc:"The session cookie (HttpOnly, SameSite=Strict), or its removal"`
	Body      Session
}

func (s *server) registerSession(api huma.API) {
	route(api, accessSession, s.withBody(huma.Operation{
		OperationID: "create-session", Method: http.MethodPost, Path: "/api/v1/session", Tags: []string{"session"},
		Summary:     "Start a dashboard session",
		Description: "Exchanges the token for an HttpOnly, SameSite=Strict cookie (Secure over TLS, behind a trusted proxy that says https, or with cookie_secure) that the server accepts like the bearer header (browsers' EventSource cannot send headers). 401 wrong token; 429 after too many wrong tokens from this client (see Retry-After). Without a token configured, no cookie is needed: 200 with auth_required false, from this host only (403 otherwise).",
		Errors:      []int{http.StatusUnauthorized},
	}), s.createSession)
	route(api, accessSession, huma.Operation{
		OperationID: "delete-session", Method: http.MethodDelete, Path: "/api/v1/session", Tags: []string{"session"},
		Summary:     "End the dashboard session",
		Description: "Ends the session on the server (its cookie is no longer accepted anywhere) and clears the cookie.",
	}, s.deleteSession)
}

func (s *server) cookie(value string, exp time.Time, secure bool) string {
	c := &http.Cookie{Name: SessionCookie, Value: value, Path: s.cfg.BasePath + "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: secure || s.cfg.CookieSecure}
	if value == "" {
		c.MaxAge = -1
	} else {
		c.Expires = exp
		c.MaxAge = int(s.cfg.SessionTTL.Seconds())
	}
	return c.String()
}

func (s *server) createSession(ctx context.Context, in *SessionInput) (*SessionOutput, error) {
	if s.cfg.Token == "" {
		return &SessionOutput{Body: Session{Authenticated: false, AuthRequired: false}}, nil
	}
	ri := requestInfo(ctx)
	if !s.tokenOK(in.Body.Token) {
		s.logins.failed(ri.client, "session", s.cfg.Clock.Now())
		return nil, huma.Error401Unauthorized("wrong token")
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	nonce := hex.EncodeToString(b[:])
	now := s.cfg.Clock.Now()
	exp := now.Add(s.cfg.SessionTTL).Truncate(time.Second)
	if err := s.store.Client().Set(ctx, s.store.Keys().Session(nonce), ri.client, exp.Sub(now)).Err(); err != nil {
		return nil, s.fail(ctx, "store the session", err)
	}
	return &SessionOutput{
		SetCookie: s.cookie(s.sessionValue(exp, nonce), exp, ri.https),
		Body:      Session{Authenticated: true, AuthRequired: true, ExpiresAt: exp.UnixMilli()},
	}, nil
}

func (s *server) deleteSession(ctx context.Context, _ *struct{}) (*SessionOutput, error) {
	ri := requestInfo(ctx)
	if nonce, ok := s.sessionNonce(ri.cookie); ok {
		if err := s.store.Client().Del(ctx, s.store.Keys().Session(nonce)).Err(); err != nil {
			return nil, s.fail(ctx, "end the session", err)
		}
	}
	return &SessionOutput{SetCookie: s.cookie("", time.Time{}, ri.https), Body: Session{AuthRequired: s.cfg.Token != ""}}, nil
}
