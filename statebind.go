package glovebox

import (
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
)

// A state's binding: a front end that stores states where others can
// write (a shared database) binds each to where it belongs (a tenant, a
// session and its version), so that a state moved to another row, of
// another tenant say, is refused before it opens, though it would
// authenticate: sealing proves a state was made with the key, not
// whose it is.

// bindTagLen is the length of a binding tag: an HMAC-SHA256.
const bindTagLen = sha256.Size

// bindKey derives a key's binding key from its secret: an HMAC-SHA256 of
// a fixed label, so the binding key is not the sealing key.
func bindKey(secret []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("glovebox state binding v1"))
	return m.Sum(nil)
}

// BindState returns a 32-byte tag binding state (from [Session.Suspend],
// [Session.Checkpoint] or a suspended [Result]) to label, any bytes the
// caller chooses (a tenant and a row's key, say): an HMAC-SHA256, under a
// key derived from the secret of the key that sealed state, of the
// state's id and label. [Keyring.CheckState] verifies it. It reads the
// state's clear header only, so its cost does not grow with the state.
// Errors: ErrStateInvalid or ErrStateMismatch for bytes that are not a
// state of this format, ErrStateKey when the ring lacks the sealing key.
func (k *Keyring) BindState(state []byte, label string) ([]byte, error) {
	h, err := parseHeader(state)
	if err != nil {
		return nil, err
	}
	var key []byte
	if k != nil {
		key = k.binds[h.keyID]
	}
	if key == nil {
		return nil, fmt.Errorf("%w: the state was sealed with key %q, which the keyring does not hold", ErrStateKey, h.keyID)
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(h.id))
	m.Write([]byte{0})
	m.Write([]byte(label))
	return m.Sum(nil), nil
}

// CheckState verifies that tag is [Keyring.BindState]'s for state and
// label; it fails with ErrStateInvalid when it is not (the state was
// bound elsewhere, or either was altered), and with BindState's errors.
// A state that passes still has to authenticate when it is opened.
func (k *Keyring) CheckState(state []byte, label string, tag []byte) error {
	want, err := k.BindState(state, label)
	if err != nil {
		return err
	}
	if len(tag) != bindTagLen || !hmac.Equal(tag, want) {
		return fmt.Errorf("%w: the state is not bound to %q (moved from another place, or altered)", ErrStateInvalid, label)
	}
	return nil
}
