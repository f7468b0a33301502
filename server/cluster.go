package server

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	"github.com/danielgtaylor/huma/v2"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/supervisor"
)

// Cluster is what the server needs of the supervisor for cluster-wide
// actions.
type Cluster interface {
	// RollingRestart restarts a pool one worker at a time, in the
	// background; it returns how many workers it will restart.
	RollingRestart(ctx context.Context, queue string) (int, error)
}

// Host is one host of the cluster.
type Host struct {
	ID        string   `json:"id" example:"box-1" doc:"Host id"`
	Status    string   `json:"status" enum:"alive,lost" example:"alive" doc:"alive while its record's lease holds; lost once it expired"`
	Instance  string   `json:"instance,omitempty" doc:"Random id of the host's current start"`
	PID       int      `json:"pid,omitempty" example:"4242" doc:"Process id of the supervisor"`
	Hostname  string   `json:"hostname,omitempty" example:"box-1.example.net" doc:"Machine name"`
	Version   string   `json:"version,omitempty" example:"v1.0.0" doc:"Vigil version"`
	Address   string   `json:"address,omitempty" example:"127.0.0.1:8080" doc:"Admin server address"`
	Capacity  int      `json:"capacity" doc:"Most slots it runs; 0 = no limit"`
	Slots     int      `json:"slots" doc:"Slots it holds"`
	Draining  bool     `json:"draining" doc:"Releasing its slots to other hosts"`
	Leader    bool     `json:"leader" doc:"Runs the cluster-wide chores"`
	Queues    []string `json:"queues,omitempty" example:"[\"tag\"]" doc:"Queues whose pools it runs"`
	StartedAt int64    `json:"started_at,omitempty" doc:"Start of its current instance (Unix ms)"`
	SeenAt    int64    `json:"seen_at,omitempty" doc:"Last renewal of its record (Unix ms)"`
}

func hostOf(h health.Host) Host {
	st := "alive"
	if !h.Alive {
		st = "lost"
	}
	return Host{ID: h.ID, Status: st, Instance: h.Instance, PID: h.PID, Hostname: h.Hostname, Version: h.Version,
		Address: h.Address, Capacity: h.Capacity, Slots: h.Slots, Draining: h.Draining, Leader: h.Leader,
		Queues: h.Queues, StartedAt: unixMS(h.StartedAt), SeenAt: unixMS(h.SeenAt)}
}

// HostList lists the hosts.
type HostList struct {
	Hosts []Host `json:"hosts" nullable:"false" doc:"Every host seen in the last hour, by id"`
}

// HostsOutput wraps HostList.
type HostsOutput struct{ Body HostList }

// HostParam names a host in the path.
type HostParam struct {
	Host string `path:"host" maxLength:"63" pattern:"^[a-z0-9][a-z0-9_-]{0,62}$" example:"box-1" doc:"Host id"`
}

// DrainResult answers a drain or undrain.
type DrainResult struct {
	Action  string `json:"action" enum:"drain,undrain" example:"drain"`
	Host    string `json:"host" example:"box-1"`
	Message string `json:"message" example:"host box-1 drains: its slots move to other hosts"`
}

// DrainOutput wraps DrainResult.
type DrainOutput struct{ Body DrainResult }

// Pool is one pool's cluster-wide size and its workers' statuses.
type Pool struct {
	Queue  string         `json:"queue" example:"tag"`
	Size   int            `json:"size" example:"2" doc:"Desired workers, cluster-wide"`
	Counts map[string]int `json:"counts" example:"{\"healthy\":2}" doc:"Workers of the pool per status"`
}

// PoolList lists the pools.
type PoolList struct {
	Pools []Pool `json:"pools" nullable:"false" doc:"Every configured pool, by queue"`
}

// PoolsOutput wraps PoolList.
type PoolsOutput struct{ Body PoolList }

// PoolSizeInput sets a pool's size.
type PoolSizeInput struct {
	QueueParam
	Body struct {
		Size int `json:"size" minimum:"0" example:"4" doc:"Desired workers, cluster-wide (at most max_pool_size)"`
	}
}

// PoolOutput is one pool.
type PoolOutput struct{ Body Pool }

// RolloutResult answers a rolling restart.
type RolloutResult struct {
	Queue   string `json:"queue" example:"tag"`
	Workers int    `json:"workers" example:"2" doc:"Workers the rollout restarts, one at a time"`
	Message string `json:"message" example:"rolling restart of tag started: 2 workers, one at a time"`
}

// RolloutOutput wraps RolloutResult.
type RolloutOutput struct{ Body RolloutResult }

func (s *server) registerCluster(api huma.API) {
	route(api, accessRead, huma.Operation{
		OperationID: "list-hosts", Method: http.MethodGet, Path: "/api/v1/hosts", Tags: []string{"cluster"},
		Summary:     "List hosts",
		Description: "Every host of the cluster seen in the last hour: alive or lost, its slots, capacity, drain and leadership.",
	}, s.listHosts)
	for _, drain := range []bool{true, false} {
		name := map[bool]string{true: "drain", false: "undrain"}[drain]
		desc := map[bool]string{
			true:  "The host releases its slots gracefully (no crash counted) so that other hosts take them over, and claims none; for deploys.",
			false: "The host claims its share of slots again.",
		}[drain]
		route(api, accessWrite, huma.Operation{
			OperationID: name + "-host", Method: http.MethodPost, Path: "/api/v1/hosts/{host}/" + name, Tags: []string{"cluster"},
			Summary:     map[bool]string{true: "Drain a host", false: "Undrain a host"}[drain],
			Description: desc,
			Errors:      []int{http.StatusNotFound, http.StatusUnprocessableEntity},
		}, func(ctx context.Context, in *HostParam) (*DrainOutput, error) { return s.drain(ctx, in.Host, drain) })
	}
	route(api, accessRead, huma.Operation{
		OperationID: "list-pools", Method: http.MethodGet, Path: "/api/v1/pools", Tags: []string{"cluster"},
		Summary:     "List pools",
		Description: "Each configured pool's cluster-wide size and its workers per status.",
	}, s.listPools)
	route(api, accessWrite, s.withBody(huma.Operation{
		OperationID: "set-pool-size", Method: http.MethodPut, Path: "/api/v1/pools/{queue}", Tags: []string{"cluster"},
		Summary:     "Set a pool's size",
		Description: "Sets the pool's cluster-wide size; hosts grow or shrink it (shrinking by graceful stop) within a third of a lease. It holds until a host starts with a configuration whose pool sizes differ from the last applied ones.",
		Errors:      []int{http.StatusNotFound},
	}), s.setPoolSize)
	route(api, accessWrite, huma.Operation{
		OperationID: "restart-pool", Method: http.MethodPost, Path: "/api/v1/pools/{queue}/restart", Tags: []string{"cluster"},
		Summary:     "Rolling restart of a pool",
		Description: "Restarts the pool's workers one at a time, cluster-wide, each waiting for the previous one to be healthy (for deploys); failed and held workers are left alone. Answers once the rollout has started.",
		Errors:      []int{http.StatusNotFound, http.StatusUnprocessableEntity, http.StatusServiceUnavailable},
	}, s.restartPool)
}

func (s *server) listHosts(ctx context.Context, _ *struct{}) (*HostsOutput, error) {
	hs, err := s.store.Hosts(ctx)
	if err != nil {
		return nil, s.fail(ctx, "list hosts", err)
	}
	out := &HostsOutput{}
	out.Body.Hosts = make([]Host, len(hs))
	for i, h := range hs {
		out.Body.Hosts[i] = hostOf(h)
	}
	return out, nil
}

func (s *server) drain(ctx context.Context, host string, drain bool) (*DrainOutput, error) {
	if err := health.CheckName("host", host); err != nil {
		return nil, huma.Error422UnprocessableEntity(err.Error())
	}
	hs, err := s.store.Hosts(ctx)
	if err != nil {
		return nil, s.fail(ctx, "list hosts", err)
	}
	if !slices.ContainsFunc(hs, func(h health.Host) bool { return h.ID == host }) {
		return nil, huma.Error404NotFound(fmt.Sprintf("no host %q in the cluster", host))
	}
	if err := supervisor.SetDrain(ctx, s.store, host, drain); err != nil {
		return nil, s.fail(ctx, "drain "+host, err)
	}
	r := DrainResult{Action: "drain", Host: host, Message: "host " + host + " drains: its slots move to other hosts"}
	if !drain {
		r.Action, r.Message = "undrain", "host "+host+" takes its share of slots again"
	}
	s.announce(ctx, "host:"+host+":status", r.Action, host, r.Message)
	return &DrainOutput{Body: r}, nil
}

// pools reads the configured pools' sizes and their workers' statuses.
func (s *server) pools(ctx context.Context) ([]Pool, error) {
	sizes, err := supervisor.PoolSizes(ctx, s.store)
	if err != nil {
		return nil, err
	}
	cs, err := s.store.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Pool, 0, len(s.cfg.Queues))
	for _, q := range s.cfg.Queues {
		p := Pool{Queue: q, Size: sizes[q], Counts: map[string]int{}}
		for _, c := range cs {
			if c.ID.Queue == q && (c.ID.Slot < p.Size || c.Status.Running()) {
				p.Counts[string(c.Status)]++
			}
		}
		out = append(out, p)
	}
	return out, nil
}

func (s *server) listPools(ctx context.Context, _ *struct{}) (*PoolsOutput, error) {
	ps, err := s.pools(ctx)
	if err != nil {
		return nil, s.fail(ctx, "list pools", err)
	}
	return &PoolsOutput{Body: PoolList{Pools: ps}}, nil
}

func (s *server) setPoolSize(ctx context.Context, in *PoolSizeInput) (*PoolOutput, error) {
	if err := s.knownQueue(in.Queue); err != nil {
		return nil, err
	}
	if n := in.Body.Size; n < 0 || n > s.cfg.MaxPoolSize {
		return nil, huma.Error422UnprocessableEntity(fmt.Sprintf("size must be from 0 to max_pool_size (%d), got %d", s.cfg.MaxPoolSize, n))
	}
	if err := supervisor.SetPoolSize(ctx, s.store, in.Queue, in.Body.Size); err != nil {
		return nil, s.fail(ctx, "set pool size", err)
	}
	s.announce(ctx, "queue:"+in.Queue+":status", "pool_size", in.Queue, fmt.Sprintf("pool %s set to %d workers", in.Queue, in.Body.Size))
	ps, err := s.pools(ctx)
	if err != nil {
		return nil, s.fail(ctx, "list pools", err)
	}
	for _, p := range ps {
		if p.Queue == in.Queue {
			return &PoolOutput{Body: p}, nil
		}
	}
	return nil, huma.Error404NotFound("no pool " + in.Queue)
}

func (s *server) restartPool(ctx context.Context, in *QueueParam) (*RolloutOutput, error) {
	if err := s.knownQueue(in.Queue); err != nil {
		return nil, err
	}
	if s.cfg.Cluster == nil {
		return nil, huma.Error503ServiceUnavailable("no supervisor runs here: rolling restarts need one")
	}
	n, err := s.cfg.Cluster.RollingRestart(ctx, in.Queue)
	if err != nil {
		return nil, s.fail(ctx, "rolling restart of "+in.Queue, err)
	}
	msg := fmt.Sprintf("rolling restart of %s started: %d workers, one at a time", in.Queue, n)
	s.announce(ctx, "queue:"+in.Queue+":status", "rolling_restart", in.Queue, msg)
	return &RolloutOutput{Body: RolloutResult{Queue: in.Queue, Workers: n, Message: msg}}, nil
}
