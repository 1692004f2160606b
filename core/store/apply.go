package store

import (
	"encoding/binary"
	"errors"

	"github.com/dgraph-io/badger/v4"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/wire"
)

// writeTxn is a Badger update transaction that counts its changes: a commit
// without any is no fsync, and Stats.Syncs must not count it.
type writeTxn struct {
	*badger.Txn
	changes int
	setErr  error // of the age written when the transaction opened
}

func (t *writeTxn) Set(k, v []byte) error {
	t.changes++
	return t.Txn.Set(k, v)
}

func (t *writeTxn) Delete(k []byte) error {
	t.changes++
	return t.Txn.Delete(k)
}

// applyBatch makes b part of txn: its writes in order, then its election
// record.
func applyBatch(txn *writeTxn, b *Batch) error {
	for i := range b.Writes {
		if err := applyWrite(txn, &b.Writes[i]); err != nil {
			return err
		}
	}
	if b.Election != nil {
		return txn.Set(keyElection, encodeElection(b.Election))
	}
	return nil
}

// applyWrite is core.Durable.Apply for one write, against txn: reads see
// the earlier writes of the same transaction.
func applyWrite(txn *writeTxn, w *core.Write) error {
	switch w.Kind {
	case core.WriteTicket:
		if err := raise(txn, highKey(w.Name), w.Entry.Ticket, false); err != nil {
			return err
		}
		return txn.Set(ticketKey(w.Name, w.Entry.Req), encodeTicket(w.Entry, w.Lifetime))
	case core.WriteLifetime:
		k := ticketKey(w.Name, w.Entry.Req)
		item, err := txn.Get(k)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil // only an existing ticket is renewed
		}
		if err != nil {
			return err
		}
		var t core.DurableTicket
		if err := item.Value(func(v []byte) error {
			t, err = decodeTicket(k, v, w.Entry.Req)
			return err
		}); err != nil {
			return err
		}
		return txn.Set(k, encodeTicket(t.Entry, w.Lifetime))
	case core.WriteDelete:
		// The high-water mark stays; a name without tickets has no keys
		// of its own, so there is nothing else to drop.
		return txn.Delete(ticketKey(w.Name, w.Entry.Req))
	case core.WriteTomb:
		// In the ticket's place: one key per request, whichever it holds.
		return txn.Set(ticketKey(w.Name, w.Entry.Req), encodeTicket(wire.Entry{State: wire.StateReleased}, w.Lifetime))
	case core.WriteHighWater:
		return raise(txn, highKey(w.Name), w.Entry.Ticket, true)
	case core.WriteForget:
		if err := raise(txn, keyFloor, w.Entry.Ticket, false); err != nil {
			return err
		}
		return txn.Delete(highKey(w.Name))
	case core.WriteFloor:
		return raise(txn, keyFloor, w.Entry.Ticket, false)
	case core.WriteFence:
		return raise(txn, keyFence, w.Epoch, false)
	case core.WriteComplete:
		if err := raise(txn, keyComplete, w.Epoch, false); err != nil {
			return err
		}
		complete, _, err := getUint(txn, keyComplete)
		if err != nil {
			return err
		}
		return dropLed(txn, complete)
	case core.WriteLedView:
		complete, _, err := getUint(txn, keyComplete)
		if err != nil {
			return err
		}
		if w.View.Epoch > complete {
			return txn.Set(ledKey(w.View.Epoch), encodeLed(w.View))
		}
	}
	// Unknown kinds change nothing, as in core.Durable.Apply.
	return nil
}

// raise stores x under k if it is above the stored value (absent: 0). With
// create, an absent key is stored even when x is 0, as Apply's
// max(map[k], x) creates the map entry.
func raise(txn *writeTxn, k []byte, x uint64, create bool) error {
	old, found, err := getUint(txn, k)
	if err != nil {
		return err
	}
	if x > old || (create && !found) {
		return txn.Set(k, encodeUint(x))
	}
	return nil
}

func getUint(txn *writeTxn, k []byte) (uint64, bool, error) {
	item, err := txn.Get(k)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	var x uint64
	err = item.Value(func(v []byte) error {
		x, err = decodeUint(k, v)
		return err
	})
	return x, true, err
}

// dropLed deletes the led views of epochs up to complete.
func dropLed(txn *writeTxn, complete uint64) error {
	opts := badger.DefaultIteratorOptions
	opts.PrefetchValues = false
	opts.Prefix = ledPrefix
	var drop [][]byte
	err := func() error {
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().KeyCopy(nil)
			if len(k) != 9 {
				return corrupt(k, "bad led view key")
			}
			if binary.BigEndian.Uint64(k[1:]) > complete {
				break
			}
			drop = append(drop, k)
		}
		return nil
	}()
	if err != nil {
		return err
	}
	for _, k := range drop {
		if err := txn.Delete(k); err != nil {
			return err
		}
	}
	return nil
}
