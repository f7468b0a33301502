package faultproxy

import (
	"bufio"
	"strings"
	"testing"
)

// readFrame returns each whole reply, bytes unchanged, and its type; one
// frame at a time out of a stream that holds several.
func TestReadFrame(t *testing.T) {
	frames := []struct {
		raw string
		typ byte
	}{
		{"+OK\r\n", '+'},
		{"-ERR no\r\n", '-'},
		{":42\r\n", ':'},
		{"$5\r\nhello\r\n", '$'},
		{"$-1\r\n", '$'},
		{"$0\r\n\r\n", '$'},
		{"*-1\r\n", '*'},
		{"*2\r\n$1\r\na\r\n*1\r\n:1\r\n", '*'},
		{"_\r\n", '_'},
		{",3.14\r\n", ','},
		{"#t\r\n", '#'},
		{"(12345678901234567890\r\n", '('},
		{"!3\r\nerr\r\n", '!'},
		{"=7\r\ntxt:abc\r\n", '='},
		{"%2\r\n$1\r\nf\r\n$1\r\nv\r\n+k\r\n_\r\n", '%'},
		{"~1\r\n:1\r\n", '~'},
		{">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n", '>'},
		{"|1\r\n+ttl\r\n:3\r\n:7\r\n", ':'},
		{"$10\r\n" + "a\r\nb\r\nc\r\nd" + "\r\n", '$'},
		{"+" + strings.Repeat("x", 10000) + "\r\n", '+'},
	}
	var stream string
	for _, f := range frames {
		stream += f.raw
	}
	r := bufio.NewReaderSize(strings.NewReader(stream), 16)
	for i, f := range frames {
		got, typ, err := readFrame(r, nil)
		if err != nil || string(got) != f.raw || typ != f.typ {
			t.Fatalf("frame %d: %q %q %v, want %q %q", i, got, typ, err, f.raw, f.typ)
		}
	}
	for _, bad := range []string{"?\r\n", "$x\r\n", "*2\r\n:1\r\n", "$5\r\nab"} {
		if _, _, err := readFrame(bufio.NewReader(strings.NewReader(bad)), nil); err == nil {
			t.Fatalf("%q read without an error", bad)
		}
	}
}
