package server

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestPrefixTextAndClipText(t *testing.T) {
	for _, tt := range []struct {
		in   string
		n    int
		want string
	}{
		{"hello", 10, "hello"},
		{"hello", 3, "hel"},
		{"héllo", 2, "h"},         // é is two bytes: not cut in half
		{"a\xffb", 3, "a\uFFFDb"}, // invalid bytes replaced
		{"", 3, ""},
	} {
		if got := prefixText([]byte(tt.in), tt.n); got != tt.want || !utf8.ValidString(got) {
			t.Errorf("prefixText(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
	long := strings.Repeat("e", 100_000)
	if got := clipText(long, errorPreview); len(got) > errorPreview+40 || !strings.HasSuffix(got, "[truncated 98976 bytes]") {
		t.Errorf("clipText of 100,000 bytes: %d bytes, ending %q", len(got), got[len(got)-30:])
	}
	if got := clipText("short", errorPreview); got != "short" {
		t.Errorf("clipText(short) = %q", got)
	}
}
