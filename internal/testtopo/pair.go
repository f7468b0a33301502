package testtopo

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Pair is a master and one replica with no sentinel: clients name the
// master's address (a plain redis:// URL).
type Pair struct{ Master, Replica *Proc }

// StartPair starts a master on masterPort and its replica on replicaPort
// and waits until the replica is in sync.
func StartPair(tb testing.TB, masterPort, replicaPort int) *Pair {
	tb.Helper()
	need(tb, "redis-server")
	dir := tb.TempDir()
	p := &Pair{Master: newProc(tb, dir, "master", masterPort),
		Replica: newProc(tb, dir, "replica", replicaPort, "--replicaof", "127.0.0.1", strconv.Itoa(masterPort))}
	p.Master.start(tb)
	p.Replica.start(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := waitLinked(ctx, p.Replica); err != nil {
		tb.Fatalf("pair not ready: %v", err)
	}
	return p
}

// Demote swaps the roles as an operator's manual failover does, with the
// clients still pointed at the old master: the old master's writes are
// paused until the replica has all of them, the replica is promoted and
// the old master made its replica. From then on every write a client of
// the old master sends is answered READONLY. It returns when the old
// master said so.
func (p *Pair) Demote(ctx context.Context) (time.Time, error) {
	return swap(ctx, p.Master, p.Replica)
}

// Restore swaps the roles back: the original master takes writes again.
// It returns when it does.
func (p *Pair) Restore(ctx context.Context) (time.Time, error) {
	return swap(ctx, p.Replica, p.Master)
}

// swap makes to the master and from its replica, losing no write of from's.
func swap(ctx context.Context, from, to *Proc) (time.Time, error) {
	fc, tc := from.Client(), to.Client()
	defer fc.Close()
	defer tc.Close()
	if err := fc.Do(ctx, "CLIENT", "PAUSE", "5000", "WRITE").Err(); err != nil {
		return time.Time{}, fmt.Errorf("pause %s: %w", from.Name, err)
	}
	defer fc.Do(context.Background(), "CLIENT", "UNPAUSE")
	err := poll(ctx, func() (bool, error) {
		want, err := replOffset(fc.Info(ctx, "replication").Result())
		if err != nil {
			return false, err
		}
		got, err := replOffset(tc.Info(ctx, "replication").Result())
		return err == nil && got >= want, err
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("%s catching up: %w", to.Name, err)
	}
	if err := tc.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		return time.Time{}, err
	}
	host, port, _ := strings.Cut(to.Addr(), ":")
	if err := fc.Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
		return time.Time{}, err
	}
	at := time.Now()
	if err := waitLinked(ctx, from); err != nil {
		return at, err
	}
	return at, nil
}

// replOffset reads master_repl_offset from INFO replication (the offset a
// replica has processed, or a master has produced).
func replOffset(info string, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "master_repl_offset:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no master_repl_offset in INFO replication")
}

// waitLinked waits until p is a replica in sync with its master.
func waitLinked(ctx context.Context, p *Proc) error {
	c := p.Client()
	defer c.Close()
	return poll(ctx, func() (bool, error) {
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return false, err
		}
		return contains(info, "role:slave") && contains(info, "master_link_status:up"), fmt.Errorf("%s not in sync", p.Name)
	})
}
