package server

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/queue"
	"github.com/vigil-dev/vigil/schedule"
)

// Topics of the event stream (docs/design.md §8) that are not built from a name.
const (
	TopicQueues = "queue:status"
	TopicJobs   = queue.TopicJobs
)

// snapshotJobsMax bounds the running jobs a snapshot lists per queue.
const snapshotJobsMax = 1000

// JobsSnapshot is the snapshot of queue:jobs: every running job.
type JobsSnapshot struct {
	Jobs []Job `json:"jobs" nullable:"false" doc:"The jobs running now, by queue"`
}

// snapshot reads, from Redis, the current state of every existing topic
// that sub matches, in this order: system:health, hosts, queue:status, the
// queues, the workers, queue:jobs, the running jobs, the schedules. Jobs exist for a
// snapshot while they run.
func (s *server) snapshot(ctx context.Context, sub subscription) ([]health.Event, error) {
	var out []health.Event
	add := func(topic string, ts int64, v any) error {
		data, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("snapshot %s: %w", topic, err)
		}
		out = append(out, health.Event{Topic: topic, Type: health.EventSnapshot, Timestamp: ts, Data: data})
		return nil
	}
	now := s.cfg.Clock.Now().UnixMilli()
	if sub.match(TopicHealth) {
		r := s.healthReport(ctx)
		if err := add(TopicHealth, r.CheckedAt, r); err != nil {
			return nil, err
		}
	}
	if sub.wants("host") {
		hosts, err := s.store.Hosts(ctx)
		if err != nil {
			return nil, err
		}
		for _, h := range hosts {
			if t := "host:" + h.ID + ":status"; sub.match(t) {
				if err := add(t, now, hostOf(h)); err != nil {
					return nil, err
				}
			}
		}
	}
	var comps []health.Component
	if sub.wants("worker") || sub.wants("queue") {
		var err error
		if comps, err = s.store.List(ctx); err != nil {
			return nil, err
		}
	}
	if err := s.snapshotQueues(ctx, sub, comps, now, add); err != nil {
		return nil, err
	}
	for _, c := range comps {
		if c.Status == health.StatusNone || !sub.match(c.ID.Topic()) {
			continue
		}
		v := c.View()
		out = append(out, health.Event{Topic: c.ID.Topic(), Type: health.EventSnapshot, Timestamp: now, Worker: &v})
	}
	if err := s.snapshotJobs(ctx, sub, now, add); err != nil {
		return nil, err
	}
	if sub.wants("schedule") && s.schedules != nil {
		vs, err := s.schedules.List(ctx)
		if err != nil {
			return nil, err
		}
		for _, v := range vs {
			if t := schedule.Topic(v.Name); sub.match(t) {
				if err := add(t, now, scheduleOf(v)); err != nil {
					return nil, err
				}
			}
		}
	}
	return out, nil
}

func (s *server) snapshotQueues(ctx context.Context, sub subscription, comps []health.Component, now int64, add func(string, int64, any) error) error {
	want := sub.match(TopicQueues)
	for _, q := range s.cfg.Queues {
		want = want || sub.match("queue:"+q+":status")
	}
	if !want {
		return nil
	}
	live := map[string]int{}
	for _, c := range comps {
		if c.Status == health.StatusHealthy {
			live[c.ID.Queue]++
		}
	}
	per, total, err := s.cfg.Queue.Stats(ctx, s.cfg.Queues, live)
	if err != nil {
		return err
	}
	if sub.match(TopicQueues) {
		if err := add(TopicQueues, now, total); err != nil {
			return err
		}
	}
	for _, st := range per {
		if t := "queue:" + st.Queue + ":status"; sub.match(t) {
			if err := add(t, now, st); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *server) snapshotJobs(ctx context.Context, sub subscription, now int64, add func(string, int64, any) error) error {
	all, each := sub.match(TopicJobs), sub.wants("job")
	if !all && !each {
		return nil
	}
	var jobs []Job
	for _, q := range s.cfg.Queues {
		js, err := s.readJobs(ctx, q, "active", 1, snapshotJobsMax, s.insp.ListActiveTasks)
		if err != nil {
			continue // a queue asynq has not seen yet has no running job
		}
		jobs = append(jobs, js...)
	}
	if all {
		if err := add(TopicJobs, now, JobsSnapshot{Jobs: append([]Job{}, jobs...)}); err != nil {
			return err
		}
	}
	for _, j := range jobs {
		if t := queue.JobTopic(j.Queue, j.ID); each && sub.match(t) {
			if err := add(t, now, j); err != nil {
				return err
			}
		}
	}
	return nil
}
