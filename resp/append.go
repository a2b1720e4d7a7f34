package resp

import "strconv"

// The writers. Each appends one RESP element to dst and returns the
// extended slice, as strconv's Append functions do.

// AppendArray appends an array header for n elements: "*<n>\r\n".
func AppendArray(dst []byte, n int) []byte {
	dst = append(dst, '*')
	dst = strconv.AppendInt(dst, int64(n), 10)
	return append(dst, '\r', '\n')
}

// AppendBulk appends b as a bulk string: "$<len>\r\n<b>\r\n".
func AppendBulk(dst, b []byte) []byte {
	dst = append(dst, '$')
	dst = strconv.AppendInt(dst, int64(len(b)), 10)
	dst = append(dst, '\r', '\n')
	dst = append(dst, b...)
	return append(dst, '\r', '\n')
}

// AppendBulkString appends s as a bulk string.
func AppendBulkString(dst []byte, s string) []byte {
	dst = append(dst, '$')
	dst = strconv.AppendInt(dst, int64(len(s)), 10)
	dst = append(dst, '\r', '\n')
	dst = append(dst, s...)
	return append(dst, '\r', '\n')
}

// AppendInt appends n as an integer: ":<n>\r\n".
func AppendInt(dst []byte, n int64) []byte {
	dst = append(dst, ':')
	dst = strconv.AppendInt(dst, n, 10)
	return append(dst, '\r', '\n')
}

// AppendVerbatim appends b as a RESP3 verbatim string of format "txt":
// "=<len+4>\r\ntxt:<b>\r\n".
func AppendVerbatim(dst, b []byte) []byte {
	dst = append(dst, '=')
	dst = strconv.AppendInt(dst, int64(len(b)+4), 10)
	dst = append(dst, "\r\ntxt:"...)
	dst = append(dst, b...)
	return append(dst, '\r', '\n')
}

// AppendCommand appends a command as clients send it: an array of bulk
// strings.
func AppendCommand(dst []byte, args ...string) []byte {
	dst = AppendArray(dst, len(args))
	for _, a := range args {
		dst = AppendBulkString(dst, a)
	}
	return dst
}
