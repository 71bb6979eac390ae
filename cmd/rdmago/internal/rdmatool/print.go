package rdmatool

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
)

// The printer mimics iproute2's print_* helpers: each value goes to the
// plain output with its format, to the JSON output under its key, or to
// both (any); JSON is written as iproute2's json_writer writes it,
// compact or, with -p, pretty.

type mode int

const (
	anyO  mode = iota // both outputs
	fp                // the plain output only
	jsonO             // the JSON output only
)

type printer struct {
	w      *bufio.Writer
	json   bool
	pretty bool
	depth  int
	sep    byte
}

func (p *printer) eor() {
	if p.sep != 0 {
		p.w.WriteByte(p.sep)
	}
	p.sep = ','
}

func (p *printer) eol() {
	if !p.pretty {
		return
	}
	p.w.WriteByte('\n')
	for range p.depth {
		p.w.WriteString("    ")
	}
}

func (p *printer) begin(c byte) {
	p.eor()
	p.w.WriteByte(c)
	p.depth++
	p.sep = 0
}

func (p *printer) end(c byte) {
	p.depth--
	if p.sep != 0 {
		p.eol()
	}
	p.w.WriteByte(c)
	p.sep = ','
}

func (p *printer) startArray() {
	p.begin('[')
	if p.pretty {
		p.w.WriteByte(' ')
	}
}

func (p *printer) endArray() {
	if p.pretty && p.sep != 0 {
		p.w.WriteByte(' ')
	}
	p.sep = 0
	p.end(']')
}

func (p *printer) name(k string) {
	p.eor()
	p.eol()
	p.sep = 0
	p.w.WriteString(strconv.Quote(k))
	p.w.WriteByte(':')
	if p.pretty {
		p.w.WriteByte(' ')
	}
}

// jsonString quotes s as json_writer does: ", \ and control characters
// escaped, everything else as it is.
func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\f':
			b.WriteString(`\f`)
		case '\b':
			b.WriteString(`\b`)
		case '\\':
			b.WriteString(`\\`)
		case '"':
			b.WriteString(`\"`)
		case '\'':
			b.WriteString(`\'`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// value writes a JSON value (already rendered) under key, or as an array
// element when key is "".
func (p *printer) value(key, v string) {
	if key != "" {
		p.name(key)
	}
	p.eor()
	p.w.WriteString(v)
}

func (p *printer) openObject() {
	if p.json {
		p.begin('{')
	}
}

func (p *printer) closeObject() {
	if p.json {
		p.end('}')
	}
}

// newline ends a plain line, or the JSON object of the line.
func (p *printer) newline() {
	if p.json {
		p.closeObject()
		return
	}
	p.w.WriteByte('\n')
}

func (p *printer) str(m mode, key, format, v string) {
	if p.json {
		if m != fp && key != "" {
			p.value(key, jsonString(v))
		} else if m != fp {
			p.value("", jsonString(v))
		}
		return
	}
	if m != jsonO {
		fmt.Fprintf(p.w, format, v)
	}
}

func (p *printer) uint(m mode, key, format string, v uint64) {
	if p.json {
		if m != fp {
			p.value(key, strconv.FormatUint(v, 10))
		}
		return
	}
	if m != jsonO {
		fmt.Fprintf(p.w, format, v)
	}
}

// onOff is print_on_off: "on"/"off" in plain output, a boolean in JSON.
func (p *printer) onOff(key, format string, v bool) {
	if p.json {
		p.value(key, strconv.FormatBool(v))
		return
	}
	s := "off"
	if v {
		s = "on"
	}
	fmt.Fprintf(p.w, format, s)
}

// hex is print_0xhex: "0x…" in plain output (format carries the 0x), the
// digits as a string in JSON.
func (p *printer) hex(key, format string, v uint64) {
	if p.json {
		p.value(key, jsonString(strconv.FormatUint(v, 16)))
		return
	}
	fmt.Fprintf(p.w, format, v)
}

// plain writes s to the plain output only.
func (p *printer) plain(s string) {
	if !p.json {
		p.w.WriteString(s)
	}
}
