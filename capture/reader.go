package capture

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// File is one capture file, read.
type File struct {
	Path    string
	Header  Header
	Records []Record // their slices alias the file's bytes
	// Cut is set when the file ends in an incomplete frame (or a zero-filled
	// tail): a crash while it was written. Records holds every record before it.
	Cut *Cut
}

// Cut says where a file was cut.
type Cut struct {
	Offset int64 // where the incomplete frame begins
	Record int   // the number (from 1) the incomplete record would have had
}

func (c Cut) String() string {
	return fmt.Sprintf("offset %d (record %d)", c.Offset, c.Record)
}

// Read reads a capture file, or every *.emqcap file of a directory (in name
// order, which is capture start, then file number). A cut is accepted only
// at the end of a capture's last file.
func Read(path string) ([]*File, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	if !st.IsDir() {
		f, err := ReadFile(path)
		if err != nil {
			return nil, err
		}
		return []*File{f}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), Ext) {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		return nil, fmt.Errorf("capture: %s: no %s files", path, Ext)
	}
	var out []*File
	for _, n := range names {
		f, err := ReadFile(filepath.Join(path, n))
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	for i, f := range out[:len(out)-1] {
		next := out[i+1]
		if f.Cut != nil && next.Header.Started == f.Header.Started {
			return nil, fmt.Errorf("%w: %s: cut at %s, but it is not its capture's last file (%s follows)",
				ErrCorrupt, f.Path, f.Cut, filepath.Base(next.Path))
		}
	}
	return out, nil
}

// ReadFile reads one capture file.
func ReadFile(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	f := &File{Path: path}
	head := fileHead()
	if len(data) < len(head) {
		if bytes.HasPrefix([]byte(Magic), data) || (len(data) > len(Magic) && bytes.HasPrefix(data, []byte(Magic))) {
			f.Cut = &Cut{Offset: 0, Record: 1}
			return f, nil
		}
		return nil, fmt.Errorf("%w: %s: offset 0: no %q magic (%d bytes)", ErrForeign, path, strings.TrimSpace(Magic), len(data))
	}
	if !bytes.HasPrefix(data, []byte(Magic)) {
		return nil, fmt.Errorf("%w: %s: offset 0: no %q magic", ErrForeign, path, strings.TrimSpace(Magic))
	}
	if v := binary.BigEndian.Uint16(data[len(Magic):]); v != Version {
		return nil, fmt.Errorf("%w: %s: offset %d: format version %d; this emqproxy reads version %d",
			ErrVersion, path, len(Magic), v, Version)
	}
	off := len(head)
	body, n, cut, err := frame(data, off)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: %s: offset %d (header): %v", ErrCorrupt, path, off, err)
	case cut:
		f.Cut = &Cut{Offset: int64(off), Record: 1}
		return f, nil
	}
	if err := json.Unmarshal(body, &f.Header); err != nil {
		return nil, fmt.Errorf("%w: %s: offset %d (header): %v", ErrCorrupt, path, off, err)
	}
	if f.Header.Format != Version {
		return nil, fmt.Errorf("%w: %s: offset %d (header): format %d; this emqproxy reads version %d",
			ErrVersion, path, off, f.Header.Format, Version)
	}
	off += n
	for rec := 1; off < len(data); rec++ {
		body, n, cut, err := frame(data, off)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: offset %d (record %d): %v", ErrCorrupt, path, off, rec, err)
		}
		if cut {
			f.Cut = &Cut{Offset: int64(off), Record: rec}
			break
		}
		r, err := decodeRecord(body)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: offset %d (record %d): %v", ErrCorrupt, path, off, rec, err)
		}
		f.Records = append(f.Records, r)
		off += n
	}
	return f, nil
}

// frame reads the frame at off: its body and total size, or cut when the
// file ends inside it (or only zero bytes follow).
func frame(data []byte, off int) (body []byte, size int, cut bool, err error) {
	rest := data[off:]
	if zeros(rest) {
		return nil, 0, true, nil
	}
	if len(rest) < frameHead {
		return nil, 0, true, nil
	}
	n := binary.BigEndian.Uint32(rest)
	sum := binary.BigEndian.Uint32(rest[4:])
	switch {
	case n == 0:
		return nil, 0, false, fmt.Errorf("empty frame")
	case n > maxFrame:
		return nil, 0, false, fmt.Errorf("frame length %d over the limit", n)
	case int(n) > len(rest)-frameHead:
		return nil, 0, true, nil
	}
	body = rest[frameHead : frameHead+int(n)]
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return nil, 0, false, fmt.Errorf("checksum %08x, frame says %08x", got, sum)
	}
	return body, frameHead + int(n), false, nil
}

func zeros(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
