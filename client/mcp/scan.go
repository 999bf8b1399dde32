package mcp

import (
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// maxScanKey and maxScanID bound what a scan keeps of a member's name
// and of the id: no longer name can spell a member it looks for, even
// escaped, and no sensible id is longer.
const (
	maxScanKey = 64
	maxScanID  = 4096
)

// scanState is where a scan is in the top-level object.
type scanState uint8

const (
	scanTop      scanState = iota // before the top-level value
	scanKeyOrEnd                  // after '{': a member's name or '}'
	scanKey                       // after ',': a member's name
	scanColon                     // after a member's name
	scanValue                     // after ':'
	scanScalar                    // in a member's number, true, false or null
	scanNested                    // in a member's object or array
	scanComma                     // after a member's value: ',' or '}'
	scanDone                      // after the top-level object
	scanBroken                    // not one JSON object
)

// scanString is what the string being scanned is.
type scanString uint8

const (
	strNone   scanString = iota
	strKey               // a member's name
	strValue             // a member's value
	strNested            // inside a member's object or array
)

// scan follows a line too long to hold, byte by byte, far enough to find
// its top-level members: whether it has an id (and which), a method, a
// result or an error. It checks the top level's grammar, and inside
// members' values only that strings end and brackets balance: it only
// says whom to refuse the message to.
type scan struct {
	size   int
	state  scanState
	str    scanString
	esc    bool   // after a backslash in a string
	nest   int    // depth inside a member's value
	key    []byte // the member's name being read, raw, up to maxScanKey+1 bytes
	member string // the member whose value is being read
	value  []byte // the id's value being read, raw
	idRaw  json.RawMessage
	idBad  bool // the id's value is no string or number, or too long to keep
	shape  shape
}

// feed scans the next bytes of the line.
func (s *scan) feed(p []byte) {
	s.size += len(p)
	for _, b := range p {
		if s.state == scanBroken {
			return
		}
		s.step(b)
	}
}

func (s *scan) step(b byte) {
	if s.str != strNone {
		s.keep(b)
		switch {
		case s.esc:
			s.esc = false
		case b == '\\':
			s.esc = true
		case b == '"':
			s.endString()
		}
		return
	}
	if b == ' ' || b == '\t' || b == '\r' || b == '\n' {
		if s.state == scanScalar {
			s.endValue()
			s.state = scanComma
		}
		return
	}
	switch s.state {
	case scanTop:
		s.to(b == '{', scanKeyOrEnd)
	case scanKeyOrEnd, scanKey:
		switch {
		case b == '"':
			s.str, s.key = strKey, append(s.key[:0], b)
		case b == '}' && s.state == scanKeyOrEnd:
			s.state = scanDone
		default:
			s.state = scanBroken
		}
	case scanColon:
		s.to(b == ':', scanValue)
		if s.state == scanValue {
			s.startMember()
		}
	case scanValue:
		switch b {
		case '"':
			s.str = strValue
			s.keep(b)
		case '{', '[':
			s.state, s.nest = scanNested, 1
			if s.member == "id" {
				s.idBad = true
			}
		default:
			s.state = scanScalar
			s.keep(b)
		}
	case scanScalar:
		switch b {
		case ',':
			s.endValue()
			s.state = scanKey
		case '}':
			s.endValue()
			s.state = scanDone
		default:
			s.keep(b)
		}
	case scanNested:
		switch b {
		case '"':
			s.str = strNested
		case '{', '[':
			s.nest++
		case '}', ']':
			if s.nest--; s.nest == 0 {
				s.state = scanComma
			}
		}
	case scanComma:
		switch b {
		case ',':
			s.state = scanKey
		case '}':
			s.state = scanDone
		default:
			s.state = scanBroken
		}
	default: // scanDone: a second value
		s.state = scanBroken
	}
}

// to moves to next if ok, else the line is no JSON object.
func (s *scan) to(ok bool, next scanState) {
	if !ok {
		next = scanBroken
	}
	s.state = next
}

// keep records b into the member's name or the id being read.
func (s *scan) keep(b byte) {
	switch {
	case s.str == strKey:
		if len(s.key) <= maxScanKey {
			s.key = append(s.key, b)
		}
	case s.member != "id" || s.str != strValue && s.state != scanScalar:
	case len(s.value) < maxScanID:
		s.value = append(s.value, b)
	default:
		s.idBad = true
	}
}

// endString ends a string: a member's name, the id, or another.
func (s *scan) endString() {
	switch s.str {
	case strKey:
		s.state = scanColon
	case strValue:
		s.endValue()
		s.state = scanComma
	}
	s.str = strNone
}

// startMember starts the value of the member just named.
func (s *scan) startMember() {
	s.member = ""
	if len(s.key) <= maxScanKey {
		_ = json.Unmarshal(s.key, &s.member) // an unreadable name is no member we look for
	}
	switch s.member {
	case "id": // the last one counts, as when a message is decoded
		s.shape.id, s.idRaw, s.idBad, s.value = true, nil, false, s.value[:0]
	case "method":
		s.shape.method = true
	case "result", "error":
		s.shape.result = true
	}
}

// endValue ends a member's value; the id's is kept.
func (s *scan) endValue() {
	if s.member == "id" && !s.idBad {
		s.idRaw = append(json.RawMessage(nil), s.value...)
	}
	s.member = ""
}

// verdict refuses the line scanned, which had more than max bytes: to
// its id if the scan could read one, else to null; and not at all if it
// was a notification or a response.
func (s *scan) verdict(max int) verdict {
	e := &jsonrpc.Error{
		Code:    jsonrpc.CodeInvalidRequest,
		Message: fmt.Sprintf("invalid request: message too large: %d bytes, the most is %d", s.size, max),
	}
	v := verdict{reply: e, size: s.size}
	if s.state != scanDone { // not one JSON object: its members are a guess
		return v
	}
	if !s.shape.answered() {
		return verdict{why: e.Message, size: s.size}
	}
	if s.shape.id && !s.idBad && checkID(s.idRaw) == nil {
		v.id = s.idRaw
	}
	return v
}
