package testledger_test

import (
	"context"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/internal/testledger"
	"github.com/vigil-dev/vigil/internal/testredis"
)

// What a writer records, a reader reads back.
func TestWriteRead(t *testing.T) {
	env := testredis.New(t)
	opt, err := redis.ParseURL(env.URL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	ctx := context.Background()
	w := testledger.NewWriter(rdb, env.Prefix, os.Getpid())
	for _, step := range []struct{ id, outcome string }{{"a", testledger.OutcomeOK}, {"b", testledger.OutcomeError}, {"a", testledger.OutcomeOK}} {
		if err := w.Start(ctx, step.id); err != nil {
			t.Fatal(err)
		}
		if err := w.End(ctx, step.id, step.outcome); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Start(ctx, "c"); err != nil { // still inside
		t.Fatal(err)
	}
	if err := w.Exit(ctx, "clean:0"); err != nil {
		t.Fatal(err)
	}
	r := testledger.NewReader(env.Client, env.Prefix)
	must := func(m map[string]int, err error) map[string]int {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if got := must(r.Counts(ctx, "runs")); !reflect.DeepEqual(got, map[string]int{"a": 2, "b": 1, "c": 1}) {
		t.Fatalf("runs %v", got)
	}
	if got := must(r.Counts(ctx, "completions")); !reflect.DeepEqual(got, map[string]int{"a": 2}) {
		t.Fatalf("completions %v", got)
	}
	if got := must(r.Counts(ctx, "failures")); !reflect.DeepEqual(got, map[string]int{"b": 1}) {
		t.Fatalf("failures %v", got)
	}
	pid := os.Getpid()
	if got := must(r.Counts(ctx, "owners")); !reflect.DeepEqual(got, map[string]int{"c": pid}) {
		t.Fatalf("owners %v", got)
	}
	if by, err := r.PIDLists(ctx, "completers"); err != nil || !reflect.DeepEqual(by["a"], []int{pid, pid}) {
		t.Fatalf("completers %v %v", by, err)
	}
	if h, err := r.Hash(ctx, "exits"); err != nil || h[testledger.FormatPIDs([]int{pid})] != "clean:0" {
		t.Fatalf("exits %v %v", h, err)
	}
	if n, err := r.Done(ctx); err != nil || n != 1 {
		t.Fatalf("done %d %v", n, err)
	}
	if d, err := r.DoneBetween(ctx, time.Now().Add(-time.Minute), time.Now().Add(time.Minute)); err != nil || !d["a"] {
		t.Fatalf("done between %v %v", d, err)
	}
	if v, err := r.Violations(ctx); err != nil || len(v) != 0 {
		t.Fatalf("violations %v %v", v, err)
	}
}

func TestJudge(t *testing.T) {
	comp := map[string]int{"once": 1, "twice-killed": 2, "twice": 2, "excused": 3}
	by := map[string][]int{"twice-killed": {10, 11}, "twice": {12, 13}, "excused": {1, 2, 3}}
	tl := testledger.Judge([]string{"once", "lost", "twice-killed", "twice", "excused"}, comp, by,
		map[int]bool{10: true}, map[string]bool{"excused": true})
	want := testledger.Tally{Jobs: 5, Lost: 1, Duplicated: 3, Unexplained: []string{"twice completed by 12,13"}}
	if !reflect.DeepEqual(tl, want) {
		t.Fatalf("%+v, want %+v", tl, want)
	}
}
