package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/hibiken/asynq"
)

// FieldAvgMS is the rolling average job time (ms) in the queue stats hash.
const FieldAvgMS = "avg_ms"

// Stats are one queue's statistics (docs/design.md §6), or the sum of all.
// A field named after an asynq task state carries asynq's number for that
// state (Inspector.GetQueueInfo); totals are named as totals.
type Stats struct {
	Queue          string   `json:"queue" doc:"Queue name; empty for the aggregate"`
	Pending        int      `json:"pending"`
	Running        int      `json:"running"`
	Scheduled      int      `json:"scheduled"`
	Retry          int      `json:"retry"`
	Archived       int      `json:"archived"`
	Completed      int      `json:"completed"`
	Aggregating    int      `json:"aggregating"`
	Groups         []Group  `json:"groups,omitempty"`
	ProcessedTotal int      `json:"processed_total"`
	FailedTotal    int      `json:"failed_total"`
	ProcessedToday int      `json:"processed_today"`
	FailedToday    int      `json:"failed_today"`
	Paused         bool     `json:"paused"`
	PausedBy       string   `json:"paused_by,omitempty"`
	PausedAt       int64    `json:"paused_at,omitempty"`
	PausedWho      string   `json:"paused_who,omitempty"`
	PauseReason    string   `json:"pause_reason,omitempty"`
	PauseScopes    []string `json:"pause_scopes,omitempty"`
	AvgJobMS       float64  `json:"avg_job_ms"`
	LiveWorkers    int      `json:"live_workers"`
	ETASeconds     float64  `json:"eta_seconds"`
}

// Group is one asynq group of a queue: its tasks waiting for the
// aggregator.
type Group struct {
	Name string `json:"name" doc:"The group (asynq.Group)"`
	Size int    `json:"size" doc:"Its tasks waiting for the aggregator"`
}

// Stats reads the statistics of queues; live gives each queue's live
// (healthy) workers. A queue asynq has never seen has zero counts.
func (c *Control) Stats(ctx context.Context, queues []string, live map[string]int) (per []Stats, total Stats, err error) {
	pause, err := c.State(ctx, queues)
	if err != nil {
		return nil, total, err
	}
	pipe := c.rdb.Pipeline()
	avgs := make([]interface{ Val() string }, len(queues))
	for i, q := range queues {
		avgs[i] = pipe.HGet(ctx, c.keys.QueueStats(q), FieldAvgMS)
	}
	_, _ = pipe.Exec(ctx) // missing hashes are fine
	// GetQueueInfo's error for a queue asynq has never seen does not wrap
	// ErrQueueNotFound (asynq v0.26.0), so ask which queues it knows.
	known, err := c.insp.Queues()
	if err != nil {
		return nil, total, fmt.Errorf("list asynq queues: %w", err)
	}
	var weighted float64
	for i, q := range queues {
		s := Stats{Queue: q, LiveWorkers: live[q]}
		s.setPause(pause.Queues[q])
		var info *asynq.QueueInfo
		if slices.Contains(known, q) {
			info, err = c.insp.GetQueueInfo(q)
		} else {
			err = asynq.ErrQueueNotFound
		}
		switch {
		case errors.Is(err, asynq.ErrQueueNotFound):
		case err != nil:
			return nil, total, fmt.Errorf("queue %s info: %w", q, err)
		default:
			s.Pending, s.Running, s.Scheduled, s.Retry = info.Pending, info.Active, info.Scheduled, info.Retry
			s.Archived, s.Completed, s.Aggregating = info.Archived, info.Completed, info.Aggregating
			s.ProcessedTotal, s.FailedTotal = info.ProcessedTotal, info.FailedTotal
			s.ProcessedToday, s.FailedToday = info.Processed, info.Failed
		}
		if s.Aggregating > 0 {
			gs, err := c.insp.Groups(q)
			if err != nil {
				return nil, total, fmt.Errorf("queue %s groups: %w", q, err)
			}
			for _, g := range gs {
				s.Groups = append(s.Groups, Group{Name: g.Group, Size: g.Size})
			}
			slices.SortFunc(s.Groups, func(a, b Group) int { return strings.Compare(a.Name, b.Name) })
		}
		s.AvgJobMS, _ = strconv.ParseFloat(avgs[i].Val(), 64)
		s.ETASeconds = eta(s.Pending, s.AvgJobMS, s.LiveWorkers)
		per = append(per, s)

		total.Pending += s.Pending
		total.Running += s.Running
		total.Scheduled += s.Scheduled
		total.Retry += s.Retry
		total.Archived += s.Archived
		total.Completed += s.Completed
		total.Aggregating += s.Aggregating
		total.ProcessedTotal += s.ProcessedTotal
		total.FailedTotal += s.FailedTotal
		total.ProcessedToday += s.ProcessedToday
		total.FailedToday += s.FailedToday
		total.LiveWorkers += s.LiveWorkers
		weighted += s.AvgJobMS * float64(s.ProcessedTotal)
	}
	total.Paused = pause.Global
	if total.ProcessedTotal > 0 {
		total.AvgJobMS = weighted / float64(total.ProcessedTotal)
	}
	total.ETASeconds = eta(total.Pending, total.AvgJobMS, total.LiveWorkers)
	return per, total, nil
}

func eta(pending int, avgMS float64, live int) float64 {
	if live == 0 || avgMS == 0 {
		return 0
	}
	return float64(pending) * avgMS / float64(live) / 1000
}

func (s *Stats) setPause(p QueuePause) {
	s.Paused, s.PausedBy, s.PausedWho, s.PauseReason, s.PauseScopes = p.Paused, p.By, p.Who, p.Why, p.Scopes
	if !p.Since.IsZero() {
		s.PausedAt = p.Since.UnixMilli()
	}
}
