// Package clientwire is what every front end that relays a guest's tool
// calls to a client in another process shares: the tool-answer frames
// (n, t, f, s, i, j, err, abort: EXECUTOR.md, "tool-results"), the
// encoding of a call's arguments, an eval's result in JSON
// (EvalResult), code mode's request and answer shapes, and a
// command run's request and result (Command, Result).
//
// The executor (EXECUTOR.md, over HTTPS) and the embedded child that the
// Ruby gem starts (docs/embedded.md, over a socketpair) both speak it, so
// a client converts values and reads results by one set of rules
// whichever way it reaches glovebox.
package clientwire
