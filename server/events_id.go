package server

import (
	"strconv"
	"strings"
)

// streamID is a Redis stream entry id, <ms>-<seq>: the SSE id of every
// event (DESIGN.md §8).
type streamID struct{ ms, seq uint64 }

// zeroID is before every entry.
var zeroID = streamID{}

func parseStreamID(s string) (streamID, bool) {
	a, b, ok := strings.Cut(s, "-")
	if !ok || len(s) > 41 {
		return streamID{}, false
	}
	ms, err1 := strconv.ParseUint(a, 10, 64)
	seq, err2 := strconv.ParseUint(b, 10, 64)
	if err1 != nil || err2 != nil {
		return streamID{}, false
	}
	return streamID{ms, seq}, true
}

// mustID parses an id Redis gave us; a malformed one sorts first.
func mustID(s string) streamID {
	id, _ := parseStreamID(s)
	return id
}

func (a streamID) String() string {
	return strconv.FormatUint(a.ms, 10) + "-" + strconv.FormatUint(a.seq, 10)
}

func (a streamID) cmp(b streamID) int {
	switch {
	case a.ms < b.ms:
		return -1
	case a.ms > b.ms:
		return 1
	case a.seq < b.seq:
		return -1
	case a.seq > b.seq:
		return 1
	}
	return 0
}
