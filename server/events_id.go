package server

import (
	"strconv"
	"strings"
)

// streamID is the SSE id of an event (docs/design.md §8): a Redis stream entry
// id, <ms>-<seq>, and for the second event of an entry that is also
// another topic's (health.EntryAlso: a job event, also on queue:jobs)
// that id with ".1" (n = 1). They order as the events are sent: an
// entry's own event, then its also event, then the next entry's. A
// client that resumes from an entry's own event gets its also event
// first, if it wants it; one that resumes from an also event, nothing of
// that entry.
type streamID struct {
	ms, seq uint64
	n       uint8
}

// zeroID is before every entry.
var zeroID = streamID{}

// alsoSuffix ends the id of an entry's also event.
const alsoSuffix = ".1"

func parseStreamID(s string) (streamID, bool) {
	s, also := strings.CutSuffix(s, alsoSuffix)
	a, b, ok := strings.Cut(s, "-")
	if !ok || len(s) > 41 {
		return streamID{}, false
	}
	ms, err1 := strconv.ParseUint(a, 10, 64)
	seq, err2 := strconv.ParseUint(b, 10, 64)
	if err1 != nil || err2 != nil {
		return streamID{}, false
	}
	id := streamID{ms: ms, seq: seq}
	if also {
		id.n = 1
	}
	return id, true
}

// mustID parses an id Redis gave us; a malformed one sorts first.
func mustID(s string) streamID {
	id, _ := parseStreamID(s)
	return id
}

func (a streamID) String() string {
	s := a.entry()
	if a.n > 0 {
		s += alsoSuffix
	}
	return s
}

// entry is the id of a's stream entry, as Redis writes it.
func (a streamID) entry() string {
	return strconv.FormatUint(a.ms, 10) + "-" + strconv.FormatUint(a.seq, 10)
}

// also is the id of the also event of a's entry.
func (a streamID) also() streamID {
	a.n = 1
	return a
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
	case a.n < b.n:
		return -1
	case a.n > b.n:
		return 1
	}
	return 0
}
