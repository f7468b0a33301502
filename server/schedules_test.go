package server_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/vigil-dev/vigil/server"
)

// fieldProblem is a 422 problem detail with its errors.
type fieldProblem struct {
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Errors []struct {
		Location string `json:"location"`
		Message  string `json:"message"`
	} `json:"errors"`
}

// TestSchedulesAPI: create, read, update, pause, resume, trigger and
// delete a schedule through the API; each answer shows the state after it.
func TestSchedulesAPI(t *testing.T) {
	h := newHarness(t, setup{})
	body := `{"name":"nightly","spec":"CRON_TZ=Europe/Paris 0 2 * * *","queue":"` + h.q1 + `","type":"report:daily","payload":{"kind":"daily"},"max_retry":3,"retention_seconds":3600}`
	rec := h.post("/api/v1/schedules", body)
	created := decode[server.Schedule](t, rec, http.StatusCreated)
	if rec.Header().Get("Location") != "api/v1/schedules/nightly" || created.Name != "nightly" || created.CatchUp != "last" ||
		created.Source != "api" || created.NextMS == 0 || string(created.Payload) != `{"kind":"daily"}` || *created.MaxRetry != 3 {
		t.Fatalf("created %+v (Location %q)", created, rec.Header().Get("Location"))
	}
	list := decode[server.ScheduleList](t, h.get("/api/v1/schedules"), http.StatusOK)
	if len(list.Schedules) != 1 || list.Schedules[0].Name != "nightly" {
		t.Fatalf("list %+v", list)
	}
	paused := decode[server.ScheduleAction](t, h.post("/api/v1/schedules/nightly/pause", ""), http.StatusOK)
	if !paused.Changed || !paused.Schedule.Paused || paused.Schedule.NextMS != 0 {
		t.Errorf("pause %+v", paused)
	}
	again := decode[server.ScheduleAction](t, h.post("/api/v1/schedules/nightly/pause", ""), http.StatusOK)
	if again.Changed || !strings.Contains(again.Message, "already paused") {
		t.Errorf("second pause %+v", again)
	}
	trig := decode[server.ScheduleAction](t, h.post("/api/v1/schedules/nightly/trigger", ""), http.StatusOK)
	if !strings.HasPrefix(trig.TaskID, "sched.nightly.manual.") || trig.Schedule.Task != trig.TaskID || trig.Schedule.Fires != 1 {
		t.Errorf("trigger %+v", trig)
	}
	job := decode[map[string]any](t, h.get("/api/v1/jobs/"+h.q1+"/"+trig.TaskID), http.StatusOK)
	if job["type"] != "report:daily" {
		t.Errorf("the triggered job %v", job)
	}
	resumed := decode[server.ScheduleAction](t, h.post("/api/v1/schedules/nightly/resume", ""), http.StatusOK)
	if !resumed.Changed || resumed.Schedule.Paused || resumed.Schedule.NextMS == 0 {
		t.Errorf("resume %+v", resumed)
	}
	upd := decode[server.Schedule](t, h.do(req{method: http.MethodPut, path: "/api/v1/schedules/nightly", token: testToken,
		body: `{"spec":"@hourly","queue":"` + h.q2 + `","type":"report:hourly","catch_up":"all"}`}), http.StatusOK)
	if upd.Spec != "@hourly" || upd.Queue != h.q2 || upd.CatchUp != "all" || upd.Fires != 1 || upd.Task != trig.TaskID {
		t.Errorf("update %+v", upd)
	}
	if rec := h.do(req{method: http.MethodDelete, path: "/api/v1/schedules/nightly", token: testToken}); rec.Code != http.StatusNoContent {
		t.Fatalf("delete: %d %s", rec.Code, rec.Body)
	}
	wantProblem(t, h.get("/api/v1/schedules/nightly"), http.StatusNotFound)
	wantProblem(t, h.post("/api/v1/schedules/nightly/trigger", ""), http.StatusNotFound)
	wantProblem(t, h.do(req{method: http.MethodDelete, path: "/api/v1/schedules/nightly", token: testToken}), http.StatusNotFound)
	// Mutations need the token.
	if rec := h.do(req{method: http.MethodPost, path: "/api/v1/schedules", body: body, remote: "10.0.0.9:5000"}); rec.Code != http.StatusUnauthorized {
		t.Errorf("create without a token from afar: %d", rec.Code)
	}
}

// TestSchedulesBadInput: each refusal is a 422 problem whose error names
// the field, and stores nothing.
func TestSchedulesBadInput(t *testing.T) {
	h := newHarness(t, setup{cfg: func(c *server.Config) { c.MaxPayload = 1000 }})
	ok := map[string]any{"name": "ok", "spec": "@hourly", "queue": h.q1, "type": "t"}
	b, _ := json.Marshal(ok)
	decode[server.Schedule](t, h.post("/api/v1/schedules", string(b)), http.StatusCreated)
	big := strings.Repeat("x", 2000)
	tests := []struct {
		name   string
		change map[string]any
		field  string
		says   string
	}{
		{"invalid cron spec", map[string]any{"spec": "61 * * * *"}, "body.spec", "above maximum"},
		{"invalid time zone", map[string]any{"spec": "CRON_TZ=Mars/Base 0 * * * *"}, "body.spec", "unknown time zone"},
		{"too fast", map[string]any{"spec": "@every 100ms"}, "body.spec", "faster than once a second"},
		{"unknown queue", map[string]any{"queue": "nope"}, "body.queue", "unknown queue"},
		{"payload over the limit", map[string]any{"payload": big}, "body.payload", "over the limit"},
		{"duplicate name", map[string]any{"name": "ok"}, "body.name", "schedule exists"},
		{"bad name", map[string]any{"name": "Bad Name"}, "body.name", "must match"},
		{"bad catch_up", map[string]any{"catch_up": "most"}, "body.catch_up", ""},
		{"negative retry", map[string]any{"max_retry": -1}, "body.max_retry", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := map[string]any{"name": "fresh", "spec": "@hourly", "queue": h.q1, "type": "t"}
			for k, v := range tt.change {
				d[k] = v
			}
			b, _ := json.Marshal(d)
			rec := h.post("/api/v1/schedules", string(b))
			wantProblem(t, rec, http.StatusUnprocessableEntity)
			p := decode[fieldProblem](t, rec, http.StatusUnprocessableEntity)
			found := false
			for _, e := range p.Errors {
				if e.Location == tt.field && strings.Contains(e.Message, tt.says) {
					found = true
				}
			}
			if !found {
				t.Errorf("problem %+v: want an error at %s saying %q", p, tt.field, tt.says)
			}
		})
	}
	list := decode[server.ScheduleList](t, h.get("/api/v1/schedules"), http.StatusOK)
	if len(list.Schedules) != 1 {
		t.Errorf("refused schedules stored: %+v", list)
	}
	wantProblem(t, h.get("/api/v1/schedules/Bad%20Name"), http.StatusUnprocessableEntity)
	wantProblem(t, h.do(req{method: http.MethodPut, path: "/api/v1/schedules/ok", token: testToken,
		body: `{"name":"other","spec":"@hourly","queue":"` + h.q1 + `","type":"t"}`}), http.StatusUnprocessableEntity)
}
