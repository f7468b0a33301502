package server

import (
	"context"
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
	route(api, accessOpen, s.withBody(huma.Operation{
		OperationID: "create-session", Method: http.MethodPost, Path: "/api/v1/session", Tags: []string{"session"},
		Summary:     "Start a dashboard session",
		Description: "Exchanges the token for an HttpOnly, SameSite=Strict cookie that the server accepts like the bearer header (browsers' EventSource cannot send headers). 401 wrong token. Without a token configured, no cookie is needed: 200 with auth_required false.",
		Errors:      []int{http.StatusUnauthorized},
	}), s.createSession)
	route(api, accessOpen, huma.Operation{
		OperationID: "delete-session", Method: http.MethodDelete, Path: "/api/v1/session", Tags: []string{"session"},
		Summary:     "End the dashboard session",
		Description: "Clears the session cookie.",
	}, s.deleteSession)
}

func (s *server) cookie(value string, exp time.Time) string {
	c := &http.Cookie{Name: SessionCookie, Value: value, Path: s.cfg.BasePath + "/", HttpOnly: true, SameSite: http.SameSiteStrictMode}
	if value == "" {
		c.MaxAge = -1
	} else {
		c.Expires = exp
		c.MaxAge = int(s.cfg.SessionTTL.Seconds())
	}
	return c.String()
}

func (s *server) createSession(_ context.Context, in *SessionInput) (*SessionOutput, error) {
	if s.cfg.Token == "" {
		return &SessionOutput{Body: Session{Authenticated: false, AuthRequired: false}}, nil
	}
	if !s.tokenOK(in.Body.Token) {
		return nil, huma.Error401Unauthorized("wrong token")
	}
	exp := s.cfg.Clock.Now().Add(s.cfg.SessionTTL).Truncate(time.Second)
	return &SessionOutput{
		SetCookie: s.cookie(s.sessionValue(exp), exp),
		Body:      Session{Authenticated: true, AuthRequired: true, ExpiresAt: exp.UnixMilli()},
	}, nil
}

func (s *server) deleteSession(context.Context, *struct{}) (*SessionOutput, error) {
	return &SessionOutput{SetCookie: s.cookie("", time.Time{}), Body: Session{AuthRequired: s.cfg.Token != ""}}, nil
}
