package server

import (
	"context"
	"strconv"
	"strings"
)

// withRunInfo adds to a job's detail what its handler reported (last
// progress, last stage) and the scratch directory a failure kept, in one
// round trip.
func (s *server) withRunInfo(ctx context.Context, q string, j *Job) error {
	k := s.store.Keys()
	vals, err := s.store.Client().MGet(ctx, k.JobProgress(q, j.ID), k.JobStage(q, j.ID), k.JobScratch(q, j.ID)).Result()
	if err != nil {
		return err
	}
	str := func(i int) string { v, _ := vals[i].(string); return v }
	if p, err := strconv.ParseFloat(str(0), 64); err == nil {
		j.Progress = &p
	}
	j.Stage = str(1)
	if size, dir, ok := strings.Cut(str(2), " "); ok {
		j.ScratchBytes, _ = strconv.ParseInt(size, 10, 64)
		j.ScratchDir = dir
	}
	return nil
}
