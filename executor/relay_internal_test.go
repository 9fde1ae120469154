package executor

import "testing"

// TestRelayWaitsWake: word for one topic signals that topic's calls and
// no other's; "" (a listener that reconnected) signals every call; a
// stopped call is signalled no more.
func TestRelayWaitsWake(t *testing.T) {
	var w relayWaits
	a1, stopA1 := w.add("a")
	a2, _ := w.add("a")
	b, _ := w.add("b")
	got := func(ch chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	w.wake("a")
	if !got(a1) || !got(a2) || got(b) {
		t.Error(`wake("a") did not signal exactly a's calls`)
	}
	w.wake("c")
	if got(a1) || got(a2) || got(b) {
		t.Error(`wake("c") signalled a call of another topic`)
	}
	stopA1()
	w.wake("")
	if got(a1) || !got(a2) || !got(b) {
		t.Error(`wake("") did not signal exactly the calls still waiting`)
	}
}
