package embed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/internal/clientwire"
	"github.com/gloveboxhq/glovebox/internal/engine"
)

// channel is one socket the parent sends requests on, one at a time (a
// Ruby thread's, for as long as it holds it): the child answers each
// before reading the next, and sends the tool calls of an eval on the
// channel that asked for the eval. One goroutine reads it at a time: the
// one serving its requests, or during a tool call the guest's (conn).
type channel struct {
	s   *server
	k   *conn
	ctx context.Context // ends with the child

	next uint64 // the last tool call's id
	// out is the running eval's output sink when it streams (a tool
	// call flushes it first, so output and calls keep their order).
	out *outputSink
}

// startChannel serves the socket fd, handed over by the parent.
func (s *server) startChannel(fd int) {
	f := os.NewFile(uintptr(fd), "glovebox-channel")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		s.log.Error("glovebox: a channel the parent sent is not a socket", "error", err.Error())
		return
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		s.log.Error("glovebox: a channel the parent sent is not a Unix socket")
		return
	}
	s.wg.Add(1)
	go s.serveChannel(uc)
}

// serveChannel answers the channel's requests in order until its end.
// An answer to a tool call no call waits for any more (its eval ended
// first) is dropped here.
func (s *server) serveChannel(uc *net.UnixConn) {
	defer s.wg.Done()
	ch := &channel{s: s, k: newConn(uc, false), ctx: s.ctx}
	defer ch.k.close()
	stop := context.AfterFunc(s.ctx, func() { // the child stopping ends the channel
		uc.SetReadDeadline(time.Now())
		ch.k.interrupt()
	})
	defer stop()
	for {
		t, b, err := ch.k.read()
		if err != nil {
			return
		}
		switch t {
		case frameRequest:
			ch.handle(b)
		case frameAnswer: // late: its eval ended before it came
		default:
			s.log.Error("glovebox: a channel frame of an unknown type; the channel is closed", "type", string(rune(t)))
			return
		}
	}
}

// handle answers one request.
func (ch *channel) handle(b []byte) {
	q, rf := decodeRequest(b)
	if rf != nil {
		ch.k.refuse(rf)
		return
	}
	s := ch.s
	switch q.Op {
	case "config":
		sid, rf := s.register(ch.ctx, q.Config)
		if rf != nil {
			ch.k.refuse(rf)
			return
		}
		ch.k.reply(map[string]uint64{"sid": sid})
	case "eval":
		s.eval(ch, q)
	case "continue":
		s.continueEval(ch, q)
	case "session_open":
		s.openSession(ch, q)
	case "session_close":
		if !s.dropSession(q.ID) {
			ch.k.refuse(refusef(codeNotFound, "no session %q", q.ID))
			return
		}
		ch.k.reply(struct{}{})
	case "codemode":
		s.codeMode(ch, q)
	case "run":
		s.run(ch, q)
	case "bind":
		ch.answer(s.bind(ch.ctx, q.Bind))
	case "call":
		ch.answer(s.hostCall(ch.ctx, q.Call))
	case "http_reset":
		ch.answer(struct{}{}, s.httpReset(q.Handle))
	case "unbind":
		if !s.unbind(q.Handle) {
			ch.k.refuse(refusef(codeUnknownHandle, "no host tools %q", q.Handle))
			return
		}
		ch.k.reply(struct{}{})
	default:
		ch.k.refuse(refusef(codeBadRequest, "unknown op %q", q.Op))
	}
}

// answer sends v as the answer, or rf's refusal when rf is set.
func (ch *channel) answer(v any, rf *refusal) {
	if rf != nil {
		ch.k.refuse(rf)
		return
	}
	ch.k.reply(v)
}

// call sends one tool call to the parent and waits for its answer, on
// this thread (conn.readDirect), until the call's deadline (the eval's,
// or its tool time's) or the eval's end (interrupt). The frame carries
// the time left before that deadline, so the parent starts no call that
// arrives too late.
func (ch *channel) call(ctx context.Context, name string, args []byte) (string, error) {
	deadline, ok := ctx.Deadline()
	left := time.Duration(-1)
	if ok {
		if left = time.Until(deadline); left <= 0 {
			return "", context.DeadlineExceeded
		}
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	ch.next++
	id := ch.next
	head := strconv.AppendUint(make([]byte, 0, 48+len(name)), id, 10)
	head = append(head, '\n')
	head = strconv.AppendInt(head, left.Microseconds(), 10)
	head = append(head, '\n')
	head = append(head, name...)
	head = append(head, '\n')
	closed := &engine.GuestError{Class: "ToolError", Message: "the tool channel to the app is closed"}
	ch.out.flush()
	if err := ch.k.write(frameCall, head, args); err != nil {
		return "", closed
	}
	want := strconv.AppendUint(make([]byte, 0, 21), id, 10)
	for {
		t, b, err := ch.k.readDirect(deadline)
		switch {
		case errors.Is(err, errTimedOut):
			return "", context.DeadlineExceeded
		case errors.Is(err, errInterrupted):
			if err := ctx.Err(); err != nil {
				return "", err
			}
			return "", context.Canceled
		case err != nil:
			return "", closed
		case t != frameAnswer:
			ch.s.log.Error("glovebox: a frame other than a tool answer during a tool call; the channel is closed", "type", string(rune(t)))
			ch.k.c.Close()
			return "", closed
		}
		head, rep, _ := bytes.Cut(b, []byte{'\n'})
		if bytes.Equal(head, want) {
			return string(rep), nil
		} // else an earlier call's late answer
	}
}

// watch makes ctx's end interrupt a tool call waiting on the channel
// (readDirect); the function returned stops watching, and forgets an
// interrupt nobody took, so it cannot end a later call.
func (ch *channel) watch(ctx context.Context) func() {
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		ch.k.interrupt()
		close(fired)
	})
	return func() {
		if !stop() {
			<-fired
			ch.k.drainInterrupt()
		}
	}
}

// watchHangup calls cancel if the parent closes the channel while a job
// (an eval or a run) is under way on it: a Ruby thread killed or
// interrupted in the middle of an eval (Thread#kill, Thread#raise,
// Rack::Timeout) closes its channel, and the job stops now instead of
// running on to its deadline with nobody to answer. It waits through
// Go's network poller (no thread is held): each wakeup, the arrival of
// data or the peer's end, checks for the end with a poll(2) that does
// not wait, so a late tool answer queued on the socket is neither read
// nor mistaken for the end. The function returned stops watching; it
// must be called before the channel is read again.
func (ch *channel) watchHangup(cancel context.CancelFunc) func() {
	rc := ch.k.rc
	if rc == nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := rc.Read(func(fd uintptr) bool {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
			for {
				_, err := unix.Poll(fds, 0)
				if err == unix.EINTR {
					continue
				}
				return err == nil && fds[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR) != 0
			}
		})
		if err == nil { // the parent's end
			cancel()
		}
	}()
	return func() {
		ch.k.c.SetReadDeadline(time.Unix(1, 0)) // ends the wait
		<-done
		if ch.ctx.Err() == nil { // the child stopping keeps its deadline (serveChannel)
			ch.k.c.SetReadDeadline(time.Time{})
		}
	}
}

// evalCtx is what an eval's tools find in their context: the channel to
// call back on, and the tools whose calls pause the eval.
type evalCtx struct {
	ch      *channel
	suspend map[string]bool
	cancel  context.CancelFunc // ends the eval: its channel is gone
}

type evalKey struct{}

// relay is a Runtime's stand-in for the parent's tool name: it sends
// the call over the eval's channel and gives the guest the parent's
// answer exactly (value, exception class, or an abort).
func relay(name string) glovebox.ToolFunc {
	return func(ctx context.Context, a glovebox.Args) (any, error) {
		ev, _ := ctx.Value(evalKey{}).(*evalCtx)
		if ev == nil {
			return nil, &engine.GuestError{Class: "ToolError", Message: "no app is attached to this eval"}
		}
		args, err := clientwire.EncodeArgs(name, a)
		if err != nil {
			return nil, err
		}
		rep, err := ev.ch.call(ctx, name, args)
		if err != nil {
			var ge *engine.GuestError
			if errors.As(err, &ge) && ev.cancel != nil {
				ev.cancel() // nobody is left to answer: the eval ends canceled
			}
			return nil, err
		}
		return clientwire.DecodeReply(rep)
	}
}

// pauseHook pauses the calls of the tools the eval names in suspend.
func pauseHook(ctx context.Context, tool string, _ glovebox.Args) error {
	if ev, _ := ctx.Value(evalKey{}).(*evalCtx); ev != nil && ev.suspend[tool] {
		return glovebox.SuspendCall(fmt.Sprintf("the sandbox asked for %s's calls to wait for an answer (suspend:)", tool))
	}
	return nil
}

// Output coalescing. A guest (or a box's command) writing one byte at a
// time would otherwise send a frame a byte, and the parent (Ruby, holding
// its interpreter lock) spends microseconds on each: a million frames an
// eval. Our choice: a frame at most every outputDelay, or when
// outputChunk bytes wait, so progress still shows within a frame of the
// eye, and at most (bytes/outputChunk + duration/outputDelay + tool
// calls) frames an eval.
const (
	outputDelay = 20 * time.Millisecond
	outputChunk = 32 << 10
)

// outputSink sends an eval's (or a run's) output as O and E frames,
// coalescing writes (see outputDelay): what waits is sent when more of
// the other stream comes (so the order of the two holds), when
// outputChunk bytes wait, outputDelay after the first waiting byte, and
// before each tool call and the answer (flush). When the channel is gone
// it ends the job (cancel): nobody reads what it makes.
type outputSink struct {
	k      *conn
	cancel context.CancelFunc

	mu     sync.Mutex
	t      byte   // the stream of buf: frameStdout or frameStderr
	buf    []byte // written, not sent
	armed  bool   // a timer will flush
	closed bool   // close was called: nothing more is sent
}

// writer is the io.Writer of stream t (frameStdout or frameStderr).
func (o *outputSink) writer(t byte) io.Writer { return sinkWriter{o, t} }

type sinkWriter struct {
	o *outputSink
	t byte
}

func (w sinkWriter) Write(p []byte) (int, error) {
	w.o.write(w.t, p)
	return len(p), nil
}

// write sends stream t's p (or keeps it for a coalesced frame).
func (o *outputSink) write(t byte, p []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return
	}
	if len(o.buf) > 0 && o.t != t {
		o.sendLocked()
	}
	o.t = t
	o.buf = append(o.buf, p...)
	if len(o.buf) >= outputChunk {
		o.sendLocked()
		return
	}
	if !o.armed {
		o.armed = true
		time.AfterFunc(outputDelay, func() {
			o.mu.Lock()
			defer o.mu.Unlock()
			o.armed = false
			if !o.closed {
				o.sendLocked()
			}
		})
	}
}

// flush sends what waits.
func (o *outputSink) flush() { o.send(false) }

// close sends what waits; nothing is sent after it.
func (o *outputSink) close() { o.send(true) }

func (o *outputSink) send(last bool) {
	if o == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.closed {
		o.sendLocked()
		o.closed = last
	}
}

func (o *outputSink) sendLocked() {
	if len(o.buf) == 0 {
		return
	}
	if err := o.k.write(o.t, o.buf); err != nil && o.cancel != nil {
		o.cancel()
	}
	if cap(o.buf) > 4*outputChunk {
		o.buf = nil
	} else {
		o.buf = o.buf[:0]
	}
}
