package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/scribehq/scribe/queue"
)

// maxMessage is the most bytes one message (one line) may have. It is
// the largest job any daemon takes (queue.MaxJobBytesLimit) and room for
// the call around it: a larger message could carry nothing a store would
// accept, and holding it would only cost memory.
const maxMessage = queue.MaxJobBytesLimit + 64<<10

// readBuffer is the read buffer of the line reader: lines longer than
// it are gathered (or, past the bound, scanned and dropped) chunk by chunk.
const readBuffer = 64 << 10

// lineTransport is scribe mcp's stdio transport: newline-delimited
// JSON-RPC, one message per line, as the SDK's IOTransport. Unlike it, a
// line that is not a valid JSON-RPC 2.0 message never reaches the SDK,
// whose session ends on one: the transport answers it with an error
// response itself (or drops it, if it is a notification or a response,
// which get no answer) and goes on with the next line.
type lineTransport struct {
	// Reader and Writer are the streams; the transport never closes them.
	Reader io.Reader
	Writer io.Writer
	// MaxMessage bounds one line (0: maxMessage); a longer one is
	// refused without being held in memory beyond the bound.
	MaxMessage int
	// Log gets a line for each message refused or dropped (default:
	// discard).
	Log *slog.Logger
	// Drain bounds how long the connection, once the input has ended,
	// waits for the answers to the requests read before it (0: not at
	// all): a host that writes its requests and closes the server's stdin
	// at once still gets them.
	Drain time.Duration
}

// Connect starts reading; the reading goroutine ends at the end of the
// input or at the first read error.
func (t *lineTransport) Connect(context.Context) (sdk.Connection, error) {
	limit := t.MaxMessage
	if limit <= 0 {
		limit = maxMessage
	}
	log := t.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &lineConn{
		w:        t.Writer,
		log:      log,
		drain:    t.Drain,
		incoming: make(chan jsonrpc.Message),
		closed:   make(chan struct{}),
		done:     make(chan struct{}),
		inflight: map[string]bool{},
		answered: make(chan struct{}, 1),
	}
	go c.readLoop(&lineReader{br: bufio.NewReaderSize(t.Reader, readBuffer), max: limit})
	return c, nil
}

// lineConn is a lineTransport's connection.
//
// Close does not wait for the reading goroutine: a read of stdin cannot
// be interrupted, so the goroutine ends with the input (or, once closed,
// at its next message), as the SDK's own stdio connection does.
type lineConn struct {
	w   io.Writer
	wmu sync.Mutex // one message at a time on w: the SDK's and the refusals
	log *slog.Logger

	drain    time.Duration        // lineTransport.Drain
	incoming chan jsonrpc.Message // valid messages, from readLoop
	closed   chan struct{}        // closed by Close

	// inflight are the IDs of the requests handed to the SDK and not yet
	// answered (see claim).
	imu       sync.Mutex
	inflight  map[string]bool
	answered  chan struct{} // a token after each answer, for drainInflight
	closeOnce sync.Once
	done      chan struct{} // closed when readLoop returns, after setting err
	err       error         // why readLoop returned: io.EOF or a read or write error
}

// Read returns the next valid message.
func (c *lineConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case msg := <-c.incoming:
		return msg, nil
	case <-c.done:
		c.drainInflight(ctx)
		return nil, c.err
	case <-c.closed:
		return nil, io.EOF
	}
}

// drainInflight waits, up to the drain bound, until every request read
// has been answered: the session ends once Read reports the end of input.
func (c *lineConn) drainInflight(ctx context.Context) {
	if c.drain <= 0 {
		return
	}
	bound := time.NewTimer(c.drain)
	defer bound.Stop()
	for {
		c.imu.Lock()
		n := len(c.inflight)
		c.imu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-c.answered:
		case <-bound.C:
			c.log.Warn("input ended; not waiting any longer for the answers to the requests before it", "unanswered", n)
			return
		case <-ctx.Done():
			return
		case <-c.closed:
			return
		}
	}
}

// Write writes msg as one line.
func (c *lineConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return fmt.Errorf("encode message: %w", err)
	}
	if r, ok := msg.(*jsonrpc.Response); ok {
		defer func() {
			c.imu.Lock()
			delete(c.inflight, idKey(r.ID))
			c.imu.Unlock()
			select {
			case c.answered <- struct{}{}:
			default:
			}
		}()
	}
	return c.writeLine(b)
}

// claim records the ID of a request from the host as in flight, and
// reports false if it already was: JSON-RPC wants each ID once, and the
// SDK drops such a request silently. It gets no answer either, since an
// answer would carry an ID the host is still waiting on; it is logged.
func (c *lineConn) claim(msg jsonrpc.Message) bool {
	r, ok := msg.(*jsonrpc.Request)
	if !ok || !r.ID.IsValid() {
		return true
	}
	c.imu.Lock()
	defer c.imu.Unlock()
	k := idKey(r.ID)
	if c.inflight[k] {
		return false
	}
	c.inflight[k] = true
	return true
}

// idKey tells IDs apart by type and value: 7 and "7" are two.
func idKey(id jsonrpc.ID) string { return fmt.Sprintf("%T:%v", id.Raw(), id.Raw()) }

// writeLine writes b and a newline, whole, between any other messages.
func (c *lineConn) writeLine(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.w.Write(append(b, '\n'))
	return err
}

// Close ends the connection: Read returns io.EOF from now on.
func (c *lineConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return nil
}

// SessionID is empty: stdio has one session.
func (c *lineConn) SessionID() string { return "" }

// readLoop reads lines until the input ends, hands each valid message
// to Read, and answers or drops the others.
func (c *lineConn) readLoop(lr *lineReader) {
	defer close(c.done)
	for {
		line, over, err := lr.next()
		if err != nil {
			c.err = err
			return
		}
		var v verdict
		if over != nil {
			v = over.verdict(lr.max)
		} else {
			v = checkMessage(line)
		}
		switch {
		case v.msg != nil && !c.claim(v.msg):
			c.log.Warn("dropped a message", "error", "a request with this id is still in flight; answering it would answer the first", "id", v.msg.(*jsonrpc.Request).ID.Raw())
		case v.msg != nil:
			select {
			case c.incoming <- v.msg:
			case <-c.closed:
				c.err = io.EOF
				return
			}
		case v.reply != nil:
			c.log.Warn("refused a message", "code", v.reply.Code, "error", v.reply.Message, "id", string(v.id), "bytes", v.size)
			if err := c.writeLine(errorResponse(v.id, v.reply)); err != nil {
				c.err = fmt.Errorf("answer a malformed message: %w", err)
				return
			}
		case v.why != "":
			c.log.Warn("dropped a message", "error", v.why, "bytes", v.size)
		}
	}
}

// errorResponse is the wire form of an error response. The SDK's encoder
// leaves out a null id, which JSON-RPC requires for a request whose id
// cannot be read, hence this one. A string id is encoded afresh, so that
// what is written is valid UTF-8 whatever the request held.
func errorResponse(id json.RawMessage, e *jsonrpc.Error) []byte {
	var s string
	if len(id) > 0 && id[0] == '"' && json.Unmarshal(id, &s) == nil {
		id, _ = json.Marshal(s)
	}
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	type response struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   *jsonrpc.Error  `json:"error"`
	}
	b, err := json.Marshal(response{"2.0", id, e})
	if err != nil { // not seen: id is a checked string or number
		b, _ = json.Marshal(response{"2.0", json.RawMessage("null"), e})
	}
	return b
}

// verdict is what becomes of one line: a message for the SDK, an error
// response to send (to the id, or null), or neither (an empty line, or
// a malformed notification or response, which why describes).
type verdict struct {
	msg   jsonrpc.Message
	reply *jsonrpc.Error
	id    json.RawMessage
	why   string
	size  int
}

// invalid refuses a request; checkMessage adds the id to answer to.
func invalid(format string, args ...any) verdict {
	return verdict{reply: &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "invalid request: " + fmt.Sprintf(format, args...)}}
}

// shape is what a message is by its members, whatever their values: the
// kind decides whether a malformed one is answered.
type shape struct{ id, method, result bool }

// answered says whether a malformed message with these members gets an
// error response. Notifications (a method, no id) and responses (a
// result or an error, no method) never get one: a notification expects
// nothing, and answering a response could start two peers answering each
// other's errors for ever.
func (s shape) answered() bool {
	switch {
	case s.method:
		return s.id
	case s.result:
		return false
	}
	return true
}

// maxSafeID bounds a numeric id: the SDK reads numbers as float64, which
// holds every integer up to 2^53 exactly; beyond, the answer's id would
// not be the request's.
const maxSafeID = 1<<53 - 1

// checkID reports whether raw is an id the SDK echoes back exactly: a
// string, or an integer of at most maxSafeID. MCP allows no null id, and
// no fraction.
func checkID(raw json.RawMessage) error {
	switch {
	case len(raw) == 0:
		return errors.New("no id")
	case raw[0] == '"':
		var s string
		return json.Unmarshal(raw, &s)
	case raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9':
		f, err := strconv.ParseFloat(string(raw), 64)
		if err != nil || f != math.Trunc(f) || math.Abs(f) > maxSafeID {
			return fmt.Errorf("id %s: a numeric id must be an integer from %d to %d", truncate(string(raw), 32), -int64(maxSafeID), int64(maxSafeID))
		}
		return nil
	case string(raw) == "null":
		return errors.New("id is null, which MCP does not allow")
	}
	return fmt.Errorf("id must be a string or an integer, not %s", valueKind(raw))
}

// valueKind names the kind of a JSON value, for errors.
func valueKind(raw json.RawMessage) string {
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// checkMessage decides one line that fits the bound.
func checkMessage(line []byte) (v verdict) {
	defer func() { v.size = len(line) }()
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return verdict{} // nothing was sent: nothing to answer
	}
	if err := json.Unmarshal(line, new(json.RawMessage)); err != nil {
		return verdict{reply: &jsonrpc.Error{Code: jsonrpc.CodeParseError, Message: "parse error: " + err.Error()}}
	}
	switch line[0] {
	case '{':
	case '[':
		return invalid("batches (a JSON array) are not supported: MCP has none since 2025-06-18; send each message on its own line")
	default:
		return invalid("a message is a JSON object, not %s", valueKind(line))
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(line, &m); err != nil { // valid JSON, so out of depth or memory
		return invalid("%v", err)
	}
	rawID, hasID := m["id"]
	rawMethod, hasMethod := m["method"]
	_, hasResult := m["result"]
	_, hasError := m["error"]
	sh := shape{id: hasID, method: hasMethod, result: hasResult || hasError}
	var id json.RawMessage // the id to answer to: null unless it can be read
	idErr := checkID(rawID)
	if idErr == nil && queue.CheckText(rawID) == nil {
		id = rawID
	}
	// A byte that is not UTF-8, or a lone surrogate escape, would reach a
	// tool as U+FFFD: a path, data or argument not as sent, or an id that
	// two requests share. Refused as the job decoder refuses it.
	if err := queue.CheckText(line); err != nil {
		v = verdict{reply: &jsonrpc.Error{Code: jsonrpc.CodeParseError, Message: "parse error: " + err.Error()}}
	} else {
		v = checkMembers(m, rawMethod, sh, idErr)
	}
	if v.reply == nil && v.why == "" {
		msg, err := jsonrpc.DecodeMessage(line)
		if err != nil { // what the SDK refuses beyond our checks (its depth limit, …)
			v = invalid("%v", err)
		} else {
			return verdict{msg: msg}
		}
	}
	if !sh.answered() {
		why := v.why
		if v.reply != nil {
			why = v.reply.Message
		}
		return verdict{why: why}
	}
	v.id = id
	return v
}

// checkMembers checks what JSON-RPC 2.0 and MCP ask of a message's
// members; the SDK checks the rest (parameters, the method's name).
func checkMembers(m map[string]json.RawMessage, rawMethod json.RawMessage, sh shape, idErr error) verdict {
	var tag string
	if err := json.Unmarshal(m["jsonrpc"], &tag); err != nil || tag != "2.0" {
		got := "none"
		if raw, ok := m["jsonrpc"]; ok {
			got = string(raw)
		}
		return invalid(`jsonrpc must be "2.0", got %s`, truncate(got, 32))
	}
	switch {
	case sh.method:
		var method string
		if rawMethod[0] != '"' || json.Unmarshal(rawMethod, &method) != nil {
			return invalid("method must be a string, not %s", valueKind(rawMethod))
		}
		if sh.id && idErr != nil {
			return invalid("%v", idErr)
		}
	case sh.result:
		if idErr != nil {
			return verdict{why: "response: " + idErr.Error()}
		}
	default:
		return invalid("neither a request (no method) nor a response (no result or error)")
	}
	return verdict{}
}

// truncate shortens s for an error message.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// lineReader reads lines of at most max bytes.
type lineReader struct {
	br  *bufio.Reader
	max int
}

// next returns the next line without its line ending, or, for a line
// over max bytes, a scan of it: the line itself is read to its end in
// chunks and dropped. At the end of the input, a last line without a
// newline counts, then next returns io.EOF.
func (r *lineReader) next() (line []byte, over *scan, err error) {
	for {
		chunk, rerr := r.br.ReadSlice('\n')
		end := rerr == nil
		if end {
			chunk = chunk[:len(chunk)-1]
		}
		switch {
		case over != nil:
			over.feed(chunk)
		case len(line)+len(chunk) > r.max+1: // +1: the line may end in "\r\n"
			over = &scan{}
			over.feed(line)
			over.feed(chunk)
			line = nil
		default:
			if need := len(line) + len(chunk); need > cap(line) {
				// Double, but never past the bound: append's growth would
				// leave a long line's copies for the collector.
				grown := make([]byte, len(line), min(max(2*cap(line), need), r.max+1))
				copy(grown, line)
				line = grown
			}
			line = append(line, chunk...)
		}
		switch {
		case end:
		case errors.Is(rerr, bufio.ErrBufferFull):
			continue
		case errors.Is(rerr, io.EOF) && (len(line) > 0 || over != nil):
		default:
			return nil, nil, rerr
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		if over == nil && len(line) > r.max {
			over = &scan{}
			over.feed(line)
		}
		if over != nil {
			return nil, over, nil
		}
		return line, nil, nil
	}
}
