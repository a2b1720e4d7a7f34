package fence

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/emqproxy/emqproxy/netaddr"
)

// Exit codes of RunCheck and RunInstall.
const (
	ExitFenced   = 0 // a module node that passes the wire-6 fence
	ExitUnfenced = 1 // any other node (or the install was refused)
	ExitError    = 2 // the node could not be reached or did not answer
)

// defaultTimeout bounds a command-line check when ctx has no deadline.
const defaultTimeout = 10 * time.Second

// Dial opens a valkey-go client to one node for the fence commands
// (client-side cache off, so no tracking is turned on).
func Dial(addr, user, pass string) (valkey.Client, error) {
	c, err := valkey.NewClient(valkey.ClientOption{
		InitAddress:  []string{addr},
		DialCtxFn:    netaddr.DialValkey, // host:port or unix:/path
		Username:     user,
		Password:     pass,
		DisableCache: true,
		DisableRetry: true,
	})
	if err != nil {
		return nil, fmt.Errorf("fence: connect %s: %w", addr, err)
	}
	return c, nil
}

// RunCheck is `emqproxy fence check ADDR`: it prints what the node is and
// whether it passes the wire-6 fence, writing nothing, and returns
// ExitFenced, ExitUnfenced or ExitError.
func RunCheck(ctx context.Context, w io.Writer, addr, user, pass string) int {
	return withNode(ctx, w, addr, user, pass, func(ctx context.Context, c Conn) int {
		res, err := Inspect(ctx, c)
		if err != nil {
			fmt.Fprintf(w, "node %s: %v\n", addr, err)
			return ExitError
		}
		printResult(w, addr, res)
		if _, err := CheckModule(ctx, c, nil, false); err != nil {
			return fenceFailed(w, err)
		}
		fmt.Fprintf(w, "  fence:   holds (wire-6 clients and the proxy may use this node)\n")
		return ExitFenced
	})
}

// RunInstall is `emqproxy fence install ADDR`: it sends EMQ.INSTALL 1
// {emq}:version, prints its outcome, then runs the wire-6 fence and
// returns ExitFenced when the node now passes it.
func RunInstall(ctx context.Context, w io.Writer, addr, user, pass string) int {
	return withNode(ctx, w, addr, user, pass, func(ctx context.Context, c Conn) int {
		n, err := Install(ctx, c)
		switch {
		case err != nil && !isFenceErr(err):
			fmt.Fprintf(w, "node %s: %v\n", addr, err)
			return ExitError
		case err != nil:
			fmt.Fprintf(w, "node %s: install refused: %v\n", addr, err)
			return ExitUnfenced
		case n == 1:
			fmt.Fprintf(w, "node %s: installed: %s is now %q\n", addr, VersionKey, ModuleBrand)
		default:
			fmt.Fprintf(w, "node %s: already installed: %s is %q\n", addr, VersionKey, ModuleBrand)
		}
		res, err := CheckModule(ctx, c, nil, false)
		if err != nil {
			return fenceFailed(w, err)
		}
		printResult(w, addr, res)
		fmt.Fprintf(w, "  fence:   holds\n")
		return ExitFenced
	})
}

// withNode connects to addr (bounding ctx with the default timeout when it
// has no deadline) and runs do over the connection; a node that cannot be
// reached is reported and gives ExitError.
func withNode(ctx context.Context, w io.Writer, addr, user, pass string, do func(context.Context, Conn) int) int {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	vc, err := Dial(addr, user, pass)
	if err != nil {
		fmt.Fprintf(w, "node %s: %v\n", addr, err)
		return ExitError
	}
	defer vc.Close()
	return do(ctx, FromValkey(vc))
}

// fenceFailed writes why CheckModule failed and returns the exit code:
// ExitUnfenced for a check failure, ExitError for a transport error.
func fenceFailed(w io.Writer, err error) int {
	if !isFenceErr(err) {
		fmt.Fprintf(w, "  fence:   %v\n", err)
		return ExitError
	}
	fmt.Fprintf(w, "  fence:   fails: %v\n", err)
	return ExitUnfenced
}

// printResult writes the human-readable summary of a node.
func printResult(w io.Writer, addr string, res Result) {
	fmt.Fprintf(w, "node %s: %s\n", addr, res.Kind)
	switch {
	case res.BrandAbsent:
		fmt.Fprintf(w, "  brand:   absent (%s not set)\n", VersionKey)
	case res.Brand != "":
		fmt.Fprintf(w, "  brand:   %s\n", res.Brand)
	default:
		fmt.Fprintf(w, "  brand:   unreadable (%s is not a string)\n", VersionKey)
	}
	if !res.Module() {
		fmt.Fprintf(w, "  module:  none (EMQ.VERSION unknown)\n")
		return
	}
	fmt.Fprintf(w, "  wire:    %s\n", res.Wire)
	fmt.Fprintf(w, "  module:  %s\n", res.ModuleVersion)
	fmt.Fprintf(w, "  verbs:   %s\n", strings.Join(res.Tokens, " "))
}

// withDefaultTimeout bounds ctx by defaultTimeout unless it has a deadline.
func withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, defaultTimeout)
}
