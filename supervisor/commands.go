package supervisor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
)

// Operator actions work from any host (docs/design.md §11): an action on a
// component this host does not hold is sent to the host whose lease holds
// it, through that host's command list, and the answer comes back on a
// reply list.

type command struct {
	Op        string `json:"op"` // restart, stop, reset
	Component string `json:"component"`
	Restart   bool   `json:"restart,omitempty"`
	Reply     string `json:"reply"`
}

type commandReply struct {
	Worker *health.WorkerView `json:"worker,omitempty"`
	Err    string             `json:"err,omitempty"`
	Kind   string             `json:"kind,omitempty"` // transition, unknown, noowner
}

// wakeUp is pushed to this host's own command list by Stop so that the
// blocked read returns at once.
const wakeUp = "wake"

// forwardTimeout bounds how long a forwarded command is kept, and how
// long the host running it may take.
const forwardTimeout = 30 * time.Second

// forwardWait bounds how long a forwarded action waits for its answer: the
// holder answers once the stop it runs has ended (stop_timeout at most), so
// with the last wait's second (BLPOP waits whole seconds) every action is
// answered within stop_timeout + 2 s, whether or not the holder ever
// answers (TestForwardWaitIsBounded).
func (s *Supervisor) forwardWait() time.Duration { return s.cfg.StopTimeout + time.Second }

// ErrNoOwner is returned for an action on a component no live host holds.
var ErrNoOwner = errors.New("no live host holds this component")

// forward sends op to the host holding id and waits for its answer.
func (s *Supervisor) forward(ctx context.Context, op string, id health.ComponentID, restart bool) (health.Component, error) {
	keys := s.store.Keys()
	holders, err := s.store.LeaseHolders(ctx, []string{keys.Slot(id)})
	if err != nil {
		return health.Component{}, err
	}
	host := health.LeaseHost(holders[0])
	if host == "" || host == s.cfg.Host {
		sizes, err := PoolSizes(ctx, s.store)
		if err != nil {
			return health.Component{}, err
		}
		if n, ok := sizes[id.Queue]; !ok || id.Slot >= n {
			return health.Component{}, fmt.Errorf("%s: %w", id, ErrUnknownComponent)
		}
		return health.Component{}, fmt.Errorf("%s: %w", id, ErrNoOwner)
	}
	if err := s.hostAlive(ctx, id, host); err != nil {
		return health.Component{}, err
	}
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	cmd := command{Op: op, Component: id.String(), Restart: restart, Reply: keys.Reply(hex.EncodeToString(b))}
	data, _ := json.Marshal(cmd)
	pipe := s.store.Client().Pipeline()
	pipe.RPush(ctx, keys.Commands(host), data)
	pipe.Expire(ctx, keys.Commands(host), forwardTimeout)
	if _, err := pipe.Exec(ctx); err != nil {
		return health.Component{}, fmt.Errorf("send %s to host %s: %w", op, host, err)
	}
	res, err := s.awaitReply(ctx, op, id, host, cmd.Reply)
	if err != nil {
		return health.Component{}, err
	}
	var r commandReply
	if err := json.Unmarshal([]byte(res[1]), &r); err != nil {
		return health.Component{}, fmt.Errorf("%s on host %s: bad answer: %w", op, host, err)
	}
	if r.Err != "" {
		switch r.Kind {
		case "transition":
			return health.Component{}, fmt.Errorf("%s: %w", r.Err, health.ErrTransition)
		case "unknown":
			return health.Component{}, fmt.Errorf("%s: %w", r.Err, ErrUnknownComponent)
		case "noowner":
			return health.Component{}, fmt.Errorf("%s: %w", r.Err, ErrNoOwner)
		}
		return health.Component{}, errors.New(r.Err)
	}
	if op == "remove" {
		return health.Component{}, nil // gone
	}
	return s.store.Get(ctx, id)
}

// hostAlive answers ErrNoOwner at once when host, which the lease of id's
// slot names, is gone (its record expired): no one will run the command
// until the lease runs out and another host takes the slot.
func (s *Supervisor) hostAlive(ctx context.Context, id health.ComponentID, host string) error {
	h, err := s.store.ReadHost(ctx, host)
	if err != nil {
		return err
	}
	if !h.Alive {
		return fmt.Errorf("%s: its holder, host %s, is gone (the slot is taken over once its lease runs out): %w", id, host, ErrNoOwner)
	}
	return nil
}

// awaitReply waits for the answer to a command sent to host, a second at a
// time: it gives up when ctx ends or this supervisor stops (Stop cancels
// the forwards in flight: a blocked read does not see its context end),
// when host is gone meanwhile, and after forwardWait.
func (s *Supervisor) awaitReply(ctx context.Context, op string, id health.ComponentID, host, reply string) ([]string, error) {
	wait := s.forwardWait()
	if d, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(d))
	}
	deadline := time.Now().Add(wait)
	for {
		select {
		case <-s.stopCmds:
			return nil, fmt.Errorf("%s on host %s: %w", op, host, ErrStopped)
		case <-ctx.Done():
			return nil, fmt.Errorf("%s on host %s: no answer: %w", op, host, ctx.Err())
		default:
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, fmt.Errorf("%s on host %s: no answer within %s: %w", op, host, wait.Round(time.Millisecond), ErrNoOwner)
		}
		res, err := s.store.Client().BLPop(ctx, min(left, time.Second), reply).Result()
		switch {
		case err == nil:
			return res, nil
		case !errors.Is(err, redis.Nil):
			return nil, fmt.Errorf("%s on host %s: no answer: %w", op, host, err)
		}
		if err := s.hostAlive(ctx, id, host); err != nil {
			return nil, err
		}
	}
}

// serveCommands runs actions other hosts send to this one, until Stop.
func (s *Supervisor) serveCommands() {
	keys := s.store.Keys()
	for {
		select {
		case <-s.stopCmds:
			return
		default:
		}
		// A Stop ends the read (the wake-up it pushes may not get through).
		ctx, cancel := context.WithTimeout(s.leaving, 3*time.Second)
		res, err := s.store.Client().BLPop(ctx, time.Second, keys.Commands(s.cfg.Host)).Result()
		cancel()
		if err != nil {
			if !errors.Is(err, redis.Nil) {
				select {
				case <-s.stopCmds:
					return
				case <-time.After(probeInterval): // Redis unreachable: try again later
				}
			}
			continue
		}
		if res[1] == wakeUp {
			continue
		}
		var c command
		if json.Unmarshal([]byte(res[1]), &c) != nil || !strings.HasPrefix(c.Reply, keys.Prefix+"reply:") {
			s.log.Warn("ignoring malformed command", "command", res[1])
			continue
		}
		s.wg.Add(1)
		go func() { // an action may wait for a graceful stop
			defer s.wg.Done()
			s.runCommand(c)
		}()
	}
}

func (s *Supervisor) runCommand(c command) {
	ctx, cancel := context.WithTimeout(context.Background(), forwardTimeout)
	defer cancel()
	var rec health.Component
	id, err := health.ParseComponentID(c.Component)
	if err == nil {
		switch c.Op {
		case "restart":
			rec, err = s.restartLocal(ctx, id)
		case "stop":
			rec, err = s.stopLocal(ctx, id)
		case "reset":
			rec, err = s.resetLocal(ctx, id, c.Restart)
		case "remove":
			rec, err = s.removeLocal(ctx, id)
		default:
			err = fmt.Errorf("unknown command %q", c.Op)
		}
	}
	var r commandReply
	if err != nil {
		r.Err = err.Error()
		switch {
		case errors.Is(err, health.ErrTransition):
			r.Kind = "transition"
		case errors.Is(err, ErrUnknownComponent):
			r.Kind = "unknown"
		case errors.Is(err, ErrNoOwner), errors.Is(err, errNotHolder):
			r.Kind = "noowner" // the slot moved on from that host too

		}
	} else {
		v := rec.View()
		r.Worker = &v
	}
	data, _ := json.Marshal(r)
	pipe := s.store.Client().Pipeline()
	pipe.RPush(ctx, c.Reply, data)
	pipe.Expire(ctx, c.Reply, forwardTimeout)
	if _, err := pipe.Exec(ctx); err != nil {
		s.log.Warn("answer command", "op", c.Op, "component", c.Component, "err", err)
	}
}
