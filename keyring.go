package glovebox

import (
	"crypto/aes"
	"crypto/cipher"
	"errors"
	"fmt"
)

// ErrInvalidKey wraps every rejection of a [StateKey] by [NewKeyring].
var ErrInvalidKey = errors.New("glovebox: invalid state key")

// StateKey is one key of a [Keyring].
type StateKey struct {
	// ID names the key, 1 to 64 printable ASCII bytes; it is written in
	// the clear in every state the key seals, so a ring can pick the key
	// that opens it. IDs must be unique within a ring.
	ID string
	// Secret is the AES-256 key: exactly 32 bytes, from a secure random
	// source (crypto/rand), kept secret.
	Secret []byte
}

// Keyring seals and opens suspended states with AES-256-GCM. The first
// key seals; every key opens, so keys rotate: put the new key first and
// keep the old ones until no state they sealed is still wanted. A Keyring
// is immutable and safe for concurrent use; the zero value holds no keys
// and is refused by New.
type Keyring struct {
	sealID string
	aeads  map[string]cipher.AEAD
	binds  map[string][]byte // BindState's keys (statebind.go)
}

// NewKeyring makes a ring of keys, the first of which seals. It fails with
// [ErrInvalidKey] for no keys, a Secret that is not 32 bytes, an ID that
// is empty, over 64 bytes or not printable ASCII, or an ID given twice.
// The secrets are copied.
func NewKeyring(keys ...StateKey) (*Keyring, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: a keyring needs at least one key", ErrInvalidKey)
	}
	k := &Keyring{sealID: keys[0].ID, aeads: map[string]cipher.AEAD{}, binds: map[string][]byte{}}
	for _, key := range keys {
		if err := validKeyID(key.ID); err != nil {
			return nil, err
		}
		if len(key.Secret) != 32 {
			return nil, fmt.Errorf("%w: key %q has a %d-byte secret; AES-256 needs 32 bytes", ErrInvalidKey, key.ID, len(key.Secret))
		}
		if _, dup := k.aeads[key.ID]; dup {
			return nil, fmt.Errorf("%w: key id %q is given twice", ErrInvalidKey, key.ID)
		}
		block, err := aes.NewCipher(append([]byte(nil), key.Secret...))
		if err != nil {
			return nil, fmt.Errorf("%w: key %q: %v", ErrInvalidKey, key.ID, err)
		}
		gcm, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("%w: key %q: %v", ErrInvalidKey, key.ID, err)
		}
		k.aeads[key.ID] = gcm
		k.binds[key.ID] = bindKey(key.Secret)
	}
	return k, nil
}

func validKeyID(id string) error {
	if id == "" || len(id) > 64 {
		return fmt.Errorf("%w: key id %q must be 1 to 64 bytes", ErrInvalidKey, id)
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return fmt.Errorf("%w: key id %q must be printable ASCII without spaces", ErrInvalidKey, id)
		}
	}
	return nil
}

// SealingKey returns the id of the key that seals.
func (k *Keyring) SealingKey() string {
	if k == nil {
		return ""
	}
	return k.sealID
}
