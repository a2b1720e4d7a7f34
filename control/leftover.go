package control

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/emqproxy/emqproxy/control/keycopy"
	"github.com/emqproxy/emqproxy/control/table"
)

// dropCopy removes what a failed copy wrote to the target: every key of the
// queue there, or with --replace (the target had keys of the queue before
// the move) only the temporary keys of chunked copies, as --abort does. A
// failed move leaves nothing behind that costs the target memory or
// confuses the next move: --resume copies every key again anyway (what
// changed while no mover ran is unknown). It returns the keys deleted.
func dropCopy(ctx context.Context, dst *table.Node, queue string, replace bool) (int, error) {
	keys, err := keycopy.ScanQueue(ctx, dst, queue, 0)
	if err != nil {
		return 0, err
	}
	if replace {
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
	n, derr := dropCopy(context.WithoutCancel(ctx), dst, m.Queue, rec.replace)
	if derr != nil {
		return fmt.Errorf("%w (deleting the copy on %s failed too: %v; --abort deletes it)", err, dst.Name, derr)
	}
	m.say("deleted %d copied keys of %s on %s", n, m.Queue, dst.Name)
	return fmt.Errorf("%w (the %d keys copied to %s were deleted)", err, n, dst.Name)
}
