package faultproxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// maxFrame bounds one bulk string or aggregate length read from the
// server (Redis's own proto-max-bulk-len default is 512 MB).
const maxFrame = 512 << 20

var errProtocol = errors.New("faultproxy: malformed RESP reply")

// readFrame appends one whole reply from r to buf, bytes as they came, and
// returns it with its type byte (of the reply proper, past any RESP3
// attribute). It knows RESP2 and RESP3 types. miniredis's server.ParseReply
// reads only RESP2 and go-redis's reader is internal, hence this one; it
// checks the framing only, not the contents.
func readFrame(r *bufio.Reader, buf []byte) ([]byte, byte, error) {
	start := len(buf)
	buf, err := readLine(r, buf)
	if err != nil {
		return buf, 0, err
	}
	line := buf[start:]
	if len(line) < 3 {
		return buf, 0, errProtocol
	}
	typ := line[0]
	switch typ {
	case '+', '-', ':', '_', ',', '#', '(':
		return buf, typ, nil
	case '$', '!', '=':
		n, err := length(line)
		if err != nil || n < 0 {
			return buf, typ, err // $-1: null
		}
		buf, err = readN(r, buf, n+2)
		return buf, typ, err
	case '*', '~', '>', '%', '|':
		n, err := length(line)
		if err != nil || n < 0 {
			return buf, typ, err // *-1: null
		}
		if typ == '%' || typ == '|' {
			n *= 2
		}
		for range n {
			if buf, _, err = readFrame(r, buf); err != nil {
				return buf, typ, err
			}
		}
		if typ == '|' { // an attribute: the reply it annotates follows
			return readFrame(r, buf)
		}
		return buf, typ, nil
	}
	return buf, typ, fmt.Errorf("%w: type %q", errProtocol, typ)
}

// readLine appends a line ending in \n to buf.
func readLine(r *bufio.Reader, buf []byte) ([]byte, error) {
	for {
		chunk, err := r.ReadSlice('\n')
		buf = append(buf, chunk...)
		if err == nil {
			return buf, nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return buf, err
		}
		if len(buf) > maxFrame {
			return buf, errProtocol
		}
	}
}

// length parses the count of a "<type><n>\r\n" line.
func length(line []byte) (int, error) {
	n, err := strconv.Atoi(string(line[1 : len(line)-2]))
	if err != nil || n > maxFrame {
		return 0, fmt.Errorf("%w: length %q", errProtocol, line)
	}
	return n, nil
}

// readN appends exactly n bytes of r to buf.
func readN(r *bufio.Reader, buf []byte, n int) ([]byte, error) {
	start := len(buf)
	buf = append(buf, make([]byte, n)...)
	_, err := io.ReadFull(r, buf[start:])
	return buf, err
}
