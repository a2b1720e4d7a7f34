package scripts

import (
	"embed"
	"io/fs"
	"slices"
	"strings"
)

//go:embed *.lua
var files embed.FS

// Body returns the exact bytes of the script name (without ".lua"), or nil
// when there is no such script. The caller must not modify the slice.
func Body(name string) []byte {
	b, err := files.ReadFile(name + ".lua")
	if err != nil {
		return nil
	}
	return b
}

// Names returns the names of all scripts, sorted.
func Names() []string {
	entries, _ := fs.ReadDir(files, ".")
	var out []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".lua"); ok {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}
