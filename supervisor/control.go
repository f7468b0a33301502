package supervisor

import (
	"context"
	"fmt"
	"strconv"

	"github.com/vigil-dev/vigil/health"
)

// control is what a tick reads of the cluster: the control hash (pool
// sizes, drain flags, lost hosts) and the hosts.
type control struct {
	raw   map[string]string
	hosts []health.Host
}

// sizeRefusal is a pool size in Redis that this host does not follow.
type sizeRefusal struct {
	queue, value string
	used         int
}

// poolSizes reads each configured pool's size from the control hash: a
// size set there wins over the configured one, up to max (a size beyond it
// is capped: one HSET must not make every host try a million slots). A
// value that is not a whole number >= 0 is refused: the configured size
// holds.
func poolSizes(pools []Pool, raw map[string]string, max int) (map[string]int, []sizeRefusal) {
	sizes := make(map[string]int, len(pools))
	var refused []sizeRefusal
	for _, p := range pools {
		n := p.Workers
		if v, ok := raw[fieldPoolPrefix+p.Queue]; ok {
			switch m, err := strconv.Atoi(v); {
			case err != nil || m < 0:
				refused = append(refused, sizeRefusal{p.Queue, v, n})
			case m > max:
				n = max
				refused = append(refused, sizeRefusal{p.Queue, v, n})
			default:
				n = m
			}
		}
		sizes[p.Queue] = n
	}
	return sizes, refused
}

// readControl reads the control hash and the hosts, and sets the pool
// sizes and this host's drain flag from them.
func (s *Supervisor) readControl(ctx context.Context) (control, error) {
	raw, err := s.store.Client().HGetAll(ctx, s.store.Keys().Control()).Result()
	if err != nil {
		return control{}, fmt.Errorf("read control: %w", err)
	}
	sizes, refused := poolSizes(s.cfg.Pools, raw, s.cfg.MaxPoolSize)
	s.cluster.sizes = sizes
	s.logRefusals(refused)
	wasDraining := s.cluster.draining
	s.cluster.draining = raw[fieldDrainPrefix+s.cfg.Host] == "1"
	if s.cluster.draining != wasDraining {
		s.log.Info("drain changed", "draining", s.cluster.draining)
	}
	hosts, err := s.store.Hosts(ctx)
	if err != nil {
		return control{}, err
	}
	return control{raw: raw, hosts: hosts}, nil
}

// logRefusals logs each refused pool size once, when it appears.
func (s *Supervisor) logRefusals(refused []sizeRefusal) {
	seen := make(map[string]string, len(refused))
	for _, r := range refused {
		seen[r.queue] = r.value
		if s.cluster.refused[r.queue] == r.value {
			continue
		}
		s.log.Warn("pool size in Redis refused", "queue", r.queue, "value", r.value,
			"max_pool_size", s.cfg.MaxPoolSize, "size", r.used)
	}
	s.cluster.refused = seen
}
