package ctl

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/vigil-dev/vigil/openapi/client"
)

func (c *cli) table() *tabwriter.Writer { return tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0) }

func (c *cli) status(ctx context.Context) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	h, err := c.api.GetHealthWithResponse(ctx)
	if err := c.check(err, func() (*http.Response, []byte) { return h.HTTPResponse, h.Body }); err != nil {
		return err
	}
	q, err := c.api.ListQueuesWithResponse(ctx)
	if err := c.check(err, func() (*http.Response, []byte) { return q.HTTPResponse, q.Body }); err != nil {
		return err
	}
	if c.o.json {
		return c.printJSON([]byte(`{"health":` + string(h.Body) + `,"queues":` + string(q.Body) + `}`))
	}
	r := h.JSON200
	fmt.Fprintf(c.out, "status: %s\n", r.Status)
	for _, why := range r.Reasons {
		fmt.Fprintf(c.out, "  - %s\n", why)
	}
	fmt.Fprintf(c.out, "redis:  %.2f ms round trip\n", r.RedisRttMs)
	var counts []string
	for _, st := range slices.Sorted(maps.Keys(r.Counts)) {
		if r.Counts[st] > 0 {
			counts = append(counts, fmt.Sprintf("%s %d", st, r.Counts[st]))
		}
	}
	fmt.Fprintf(c.out, "workers: %d (%s)\n", r.Components, strings.Join(counts, ", "))
	ql := q.JSON200
	paused := "no"
	if ql.GlobalPaused {
		paused = "yes (global pause)"
	} else {
		var qs []string
		for _, s := range ql.Queues {
			if s.Paused {
				qs = append(qs, s.Queue+strings.TrimPrefix(pausedBy(s), "yes"))
			}
		}
		if len(qs) > 0 {
			paused = strings.Join(qs, ", ")
		}
	}
	fmt.Fprintf(c.out, "paused: %s\n", paused)
	fmt.Fprintf(c.out, "jobs:   %d pending, %d running, %d retry, %d archived, %d completed (kept); totals: %d processed, %d failed attempts\n",
		ql.Total.Pending, ql.Total.Running, ql.Total.Retry, ql.Total.Archived, ql.Total.Completed, ql.Total.ProcessedTotal, ql.Total.FailedTotal)
	return nil
}

func (c *cli) workers(ctx context.Context) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	res, err := c.api.ListWorkersWithResponse(ctx)
	if err := c.check(err, func() (*http.Response, []byte) { return res.HTTPResponse, res.Body }); err != nil {
		return err
	}
	if c.o.json {
		return c.printJSON(res.Body)
	}
	tw := c.table()
	fmt.Fprintln(tw, "COMPONENT\tSTATUS\tHOST\tPID\tRESTARTS\tLIFETIME\tEXIT\tREASON")
	for _, w := range res.JSON200.Workers {
		st := string(w.Status)
		if w.Held {
			st += " (held)"
		}
		reason := str(w.Reason)
		if w.FailureReason != nil {
			reason = *w.FailureReason
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", w.Component, st, dash(str(w.Host)), num(w.Pid),
			w.RestartCount, w.LifetimeRestarts, num(w.ExitCode), dash(reason))
	}
	return tw.Flush()
}

func (c *cli) queues(ctx context.Context) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	res, err := c.api.ListQueuesWithResponse(ctx)
	if err := c.check(err, func() (*http.Response, []byte) { return res.HTTPResponse, res.Body }); err != nil {
		return err
	}
	if c.o.json {
		return c.printJSON(res.Body)
	}
	tw := c.table()
	fmt.Fprintln(tw, "QUEUE\tPAUSED\tPENDING\tRUNNING\tSCHEDULED\tRETRY\tARCHIVED\tCOMPLETED\tAGGREGATING\tPROCESSED_TOTAL\tFAILED_TOTAL\tWORKERS\tAVG JOB\tETA")
	row := func(name string, s client.QueueStats) {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", name, pausedBy(s), s.Pending, s.Running,
			s.Scheduled, s.Retry, s.Archived, s.Completed, s.Aggregating, s.ProcessedTotal, s.FailedTotal, s.LiveWorkers,
			ms(s.AvgJobMs), seconds(s.EtaSeconds))
	}
	for _, s := range res.JSON200.Queues {
		row(s.Queue, s)
	}
	row("(total)", res.JSON200.Total)
	if err := tw.Flush(); err != nil {
		return err
	}
	if res.JSON200.GlobalPaused {
		fmt.Fprintln(c.out, "global pause: on (vigil ctl resume)")
	}
	return nil
}

func (c *cli) pause(ctx context.Context, pause bool, q []string) error {
	if len(q) == 1 && strings.HasPrefix(q[0], "worker:") {
		return c.pauseWorker(ctx, pause, q[0])
	}
	ctx, cancel := bounded(ctx)
	defer cancel()
	var (
		b    []byte
		resp = &client.PauseResult{}
		err  error
	)
	switch {
	case pause && len(q) == 0:
		var r *client.PauseAllResponse
		r, err = c.api.PauseAllWithResponse(ctx, &client.PauseAllParams{By: opt(c.o.by), Reason: opt(c.o.reason)})
		if err = c.check(err, func() (*http.Response, []byte) { return r.HTTPResponse, r.Body }); err == nil {
			b, resp = r.Body, r.JSON200
		}
	case pause:
		var r *client.PauseQueueResponse
		r, err = c.api.PauseQueueWithResponse(ctx, q[0], &client.PauseQueueParams{By: opt(c.o.by), Reason: opt(c.o.reason)})
		if err = c.check(err, func() (*http.Response, []byte) { return r.HTTPResponse, r.Body }); err == nil {
			b, resp = r.Body, r.JSON200
		}
	case len(q) == 0:
		var r *client.ResumeAllResponse
		r, err = c.api.ResumeAllWithResponse(ctx)
		if err = c.check(err, func() (*http.Response, []byte) { return r.HTTPResponse, r.Body }); err == nil {
			b, resp = r.Body, r.JSON200
		}
	default:
		var r *client.ResumeQueueResponse
		r, err = c.api.ResumeQueueWithResponse(ctx, q[0])
		if err = c.check(err, func() (*http.Response, []byte) { return r.HTTPResponse, r.Body }); err == nil {
			b, resp = r.Body, r.JSON200
		}
	}
	if err != nil {
		return err
	}
	if c.o.json {
		return c.printJSON(b)
	}
	fmt.Fprintln(c.out, resp.Message)
	return nil
}

// pauseWorker pauses or resumes one worker (pause worker:tag:0).
func (c *cli) pauseWorker(ctx context.Context, pause bool, component string) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	var (
		b   []byte
		wa  *client.WorkerAction
		err error
	)
	if pause {
		var r *client.PauseWorkerResponse
		r, err = c.api.PauseWorkerWithResponse(ctx, component, &client.PauseWorkerParams{By: opt(c.o.by), Reason: opt(c.o.reason)})
		if err = c.check(err, func() (*http.Response, []byte) { return r.HTTPResponse, r.Body }); err == nil {
			b, wa = r.Body, r.JSON200
		}
	} else {
		var r *client.ResumeWorkerResponse
		r, err = c.api.ResumeWorkerWithResponse(ctx, component, &client.ResumeWorkerParams{})
		if err = c.check(err, func() (*http.Response, []byte) { return r.HTTPResponse, r.Body }); err == nil {
			b, wa = r.Body, r.JSON200
		}
	}
	if err != nil {
		return err
	}
	if c.o.json {
		return c.printJSON(b)
	}
	fmt.Fprintln(c.out, wa.Message)
	return nil
}

func (c *cli) workerAction(ctx context.Context, action, component string) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	var (
		b   []byte
		wa  *client.WorkerAction
		err error
	)
	switch action {
	case "remove":
		var r *client.RemoveWorkerResponse
		r, err = c.api.RemoveWorkerWithResponse(ctx, component)
		if err = c.check(err, func() (*http.Response, []byte) { return r.HTTPResponse, r.Body }); err == nil {
			b, wa = r.Body, r.JSON200
		}
	case "restart":
		var r *client.RestartWorkerResponse
		r, err = c.api.RestartWorkerWithResponse(ctx, component)
		if err = c.check(err, func() (*http.Response, []byte) { return r.HTTPResponse, r.Body }); err == nil {
			b, wa = r.Body, r.JSON200
		}
	default:
		var r *client.ResetWorkerResponse
		restart := c.o.restart
		r, err = c.api.ResetWorkerWithResponse(ctx, component, &client.ResetWorkerParams{Restart: &restart})
		if err = c.check(err, func() (*http.Response, []byte) { return r.HTTPResponse, r.Body }); err == nil {
			b, wa = r.Body, r.JSON200
		}
	}
	if err != nil {
		return err
	}
	if c.o.json {
		return c.printJSON(b)
	}
	if action == "remove" {
		fmt.Fprintf(c.out, "%s (was %s, %d restarts since its last reset)\n", wa.Message, wa.Worker.Status, wa.Worker.LifetimeRestarts)
		return nil
	}
	fmt.Fprintf(c.out, "%s (now %s)\n", wa.Message, wa.Worker.Status)
	return nil
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func num(p *int64) string {
	if p == nil {
		return "-"
	}
	return strconv.FormatInt(*p, 10)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// opt is nil for "", else &s.
func opt(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// pausedBy says whether a queue is paused, and by whom.
func pausedBy(s client.QueueStats) string {
	if !s.Paused {
		return "no"
	}
	if s.PausedBy != nil {
		return "yes (" + string(*s.PausedBy) + ")"
	}
	return "yes"
}

func ms(v float64) string {
	if v <= 0 {
		return "-"
	}
	return (time.Duration(v * float64(time.Millisecond))).Round(time.Millisecond).String()
}

func seconds(v float64) string {
	if v <= 0 {
		return "-"
	}
	return (time.Duration(v * float64(time.Second))).Round(time.Second).String()
}
