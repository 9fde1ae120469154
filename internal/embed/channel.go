package embed

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/internal/clientwire"
	"github.com/gloveboxhq/glovebox/internal/engine"
)

// channel is one socket the parent sends requests on, one at a time (a
// Ruby thread's, for as long as it holds it): the child answers each
// before reading the next, and sends the tool calls of an eval on the
// channel that asked for the eval.
type channel struct {
	s   *server
	k   *conn
	ctx context.Context // ends with the socket (or the child)

	mu      sync.Mutex
	next    uint64
	waiting map[uint64]chan string
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

// serveChannel reads the channel's frames on one goroutine and answers
// its requests, in order, on another; an eval's tool answers reach the
// call waiting for them directly. The channel's end cancels what runs
// on it.
func (s *server) serveChannel(uc *net.UnixConn) {
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	ch := &channel{s: s, k: newConn(uc, false), ctx: ctx, waiting: map[uint64]chan string{}}
	stop := context.AfterFunc(ctx, func() { uc.CloseRead() }) // the child stopping ends the reader
	defer stop()
	reqs := make(chan []byte, 8)
	go func() {
		defer cancel()
		defer close(reqs)
		for {
			t, b, err := ch.k.read()
			if err != nil {
				return
			}
			switch t {
			case frameRequest:
				select {
				case reqs <- b:
				case <-ctx.Done():
					return
				}
			case frameAnswer:
				ch.deliver(b)
			default:
				s.log.Error("glovebox: a channel frame of an unknown type; the channel is closed", "type", string(rune(t)))
				return
			}
		}
	}()
	for b := range reqs {
		ch.handle(b)
	}
	uc.Close()
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
	default:
		ch.k.refuse(refusef(codeBadRequest, "unknown op %q", q.Op))
	}
}

// deliver hands a tool answer ("<id>\n<reply frame>") to the call
// waiting for it; an answer no call waits for (the eval ended first)
// is dropped.
func (ch *channel) deliver(b []byte) {
	head, rep, ok := bytes.Cut(b, []byte{'\n'})
	if !ok {
		return
	}
	id, err := strconv.ParseUint(string(head), 10, 64)
	if err != nil {
		return
	}
	ch.mu.Lock()
	w := ch.waiting[id]
	delete(ch.waiting, id)
	ch.mu.Unlock()
	if w != nil {
		w <- string(rep)
	}
}

// call sends one tool call to the parent and waits for its answer or
// ctx's end. The frame carries the time left before the call's deadline
// (the eval's, or its tool time's), so the parent starts no call that
// arrives too late.
func (ch *channel) call(ctx context.Context, name string, args []byte) (string, error) {
	left := time.Duration(-1)
	if dl, ok := ctx.Deadline(); ok {
		if left = time.Until(dl); left <= 0 {
			return "", context.DeadlineExceeded
		}
	}
	w := make(chan string, 1)
	ch.mu.Lock()
	ch.next++
	id := ch.next
	ch.waiting[id] = w
	ch.mu.Unlock()
	head := strconv.AppendUint(make([]byte, 0, 48+len(name)), id, 10)
	head = append(head, '\n')
	head = strconv.AppendInt(head, left.Microseconds(), 10)
	head = append(head, '\n')
	head = append(head, name...)
	head = append(head, '\n')
	if err := ch.k.write(frameCall, head, args); err != nil {
		ch.forget(id)
		return "", &engine.GuestError{Class: "ToolError", Message: "the tool channel to the app is closed"}
	}
	select {
	case rep := <-w:
		return rep, nil
	case <-ctx.Done():
		ch.forget(id)
		return "", ctx.Err()
	}
}

func (ch *channel) forget(id uint64) {
	ch.mu.Lock()
	delete(ch.waiting, id)
	ch.mu.Unlock()
}

// evalCtx is what an eval's tools find in their context: the channel to
// call back on, and the tools whose calls pause the eval.
type evalCtx struct {
	ch      *channel
	suspend map[string]bool
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

// outputWriter sends a stream's output as frames of type t.
type outputWriter struct {
	k *conn
	t byte
}

func (w outputWriter) Write(p []byte) (int, error) {
	w.k.write(w.t, p)
	return len(p), nil
}
