package control

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/emqproxy/emqproxy/control/keycopy"
	"github.com/emqproxy/emqproxy/control/table"

	"github.com/valkey-io/valkey-go"
)

// dropCopy removes what a move's copy wrote to the target, for a failed
// copy and for --abort: every key of the queue there, or, while the
// target still has the keys of the queue it had before a --replace move
// (rec.wiped unset: the copy has not begun), only the temporary keys of
// chunked copies. A failed move leaves nothing behind that costs the
// target memory or confuses the next move: --resume copies every key
// again anyway (what changed while no mover ran is unknown). It returns
// the keys deleted.
func dropCopy(ctx context.Context, dst *table.Node, queue string, rec *record) (int, error) {
	keys, err := keycopy.ScanQueue(ctx, dst, queue, 0)
	if err != nil {
		return 0, err
	}
	if rec.replace && !rec.wiped {
		var tmp []string
		for _, k := range keys {
			if strings.HasSuffix(k, keycopy.TmpSuffix) {
				tmp = append(tmp, k)
			}
		}
		keys = tmp
	}
	if err := unlink(ctx, dst, keys); err != nil {
		return 0, err
	}
	return len(keys), nil
}

// failedCopy is online's error after the copy was given up while the queue
// is served by its source (the record at step copying): the copy on the
// target is deleted, and the error says so (or why it could not be). Not
// for a mover that was stopped (ErrStopped, a cancelled context: as if
// killed, --resume or --abort continues), nor for a queue that may still be
// held, nor for a mover superseded: the target's keys are then another
// mover's copy (a --resume that took the move over), or --abort's to
// delete.
func (m *Mover) failedCopy(ctx context.Context, dst *table.Node, rec *record, err error) error {
	if err == nil || !errors.Is(err, table.ErrMove) || errors.Is(err, ErrStopped) || errors.Is(err, ErrSuperseded) ||
		ctx.Err() != nil || rec.step != StepCopying {
		return err
	}
	n, derr := dropCopy(context.WithoutCancel(ctx), dst, m.Queue, rec)
	if derr != nil {
		return fmt.Errorf("%w (deleting the copy on %s failed too: %v; --abort deletes it)", err, dst.Name, derr)
	}
	m.say("deleted %d copied keys of %s on %s", n, m.Queue, dst.Name)
	return fmt.Errorf("%w (the %d keys copied to %s were deleted)", err, n, dst.Name)
}

// wipeTarget deletes the target's keys of the queue before a copy of every
// key (Copier.WipeTarget). For a --replace move it first records, once,
// that from now on every key of the queue on the target is the move's
// (the record's wiped): a failed or aborted move then deletes them all
// (dropCopy), where before the copy it keeps the keys the target had.
func (m *Mover) wipeTarget(ctx context.Context, cp *keycopy.Copier, rec *record) error {
	if rec.replace && !rec.wiped {
		err := m.fenced(ctx, cp.Src, own(rec, rec.step), nil, func() valkey.Commands {
			return valkey.Commands{cp.Src.C.B().Hset().Key(table.MoveKey(m.Queue)).FieldValue().FieldValue("wiped", "1").Build()}
		})
		if err != nil {
			return stepErr(err, "recording on %s that the copy begins", cp.Src.Name)
		}
		rec.wiped = true
	}
	return cp.WipeTarget(ctx)
}
