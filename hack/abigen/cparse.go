package main

import (
	"bufio"
	"bytes"
	"regexp"
	"strings"
)

// A goType is one Go type of the generated package.
type goType struct {
	Name    string    // Go name
	C       string    // what follows "C." in the godefs input: struct_x, union_x or Typedef's name
	Header  string    // header defining it, relative to an include directory
	Typedef string    // C typedef naming a nested anonymous struct, "" for tagged types
	Anon    []anonRef `json:",omitempty"` // fields whose type is a nested anonymous struct, in order
	Fields  []member  `json:",omitempty"` // direct members, for structs

	tag    string   // "struct_x"/"union_x" for tagged types
	refs   []string // tags of the structs and unions it uses
	parent *goType  // tagged type a nested anonymous struct is in
}

// An anonRef is a field of anonymous struct type; godefs renders its type as
// _Ctype_struct___N, which post replaces with Type.
type anonRef struct{ Field, Type string }

// A constant is an enumerator or an object-like #define.
type constant struct {
	Name, Header string
	macro        bool
	pos          int    // order of appearance in the preprocessed source
	Why          string `json:"-"` // why it was dropped, for the log
}

type token struct {
	text   string
	header string
}

var (
	lineMarker = regexp.MustCompile(`^# \d+ "([^"]*)"`)
	defineRe   = regexp.MustCompile(`^#define ([A-Za-z_]\w*)(\(?)(.*)$`)
	tokenRe    = regexp.MustCompile(`[A-Za-z_]\w*|\d\w*|"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|\S`)
)

// scan parses gcc -E -dD output into types and constants, each attributed
// to the header it appears in. Every tagged struct/union definition becomes
// a type, followed by a type for each named member of anonymous struct type
// (any depth); constants are object-like non-empty macros and enumerators.
func scan(pre []byte) ([]*goType, []constant) {
	var toks []token
	var consts []constant
	header := ""
	sc := bufio.NewScanner(bytes.NewReader(pre))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := lineMarker.FindStringSubmatch(line); m != nil {
			header = relHeader(m[1])
			continue
		}
		if strings.HasPrefix(line, "#") {
			m := defineRe.FindStringSubmatch(line)
			// Skip #undef, function-like macros and empty macros
			// (include guards, feature flags).
			if m != nil && m[2] == "" && strings.TrimSpace(m[3]) != "" {
				consts = append(consts, constant{Name: m[1], Header: header, macro: true, pos: 2 * len(toks)})
			}
			continue
		}
		for _, t := range tokenRe.FindAllString(line, -1) {
			toks = append(toks, token{t, header})
		}
	}

	var types []*goType
	for i := 0; i < len(toks); i++ {
		switch toks[i].text {
		case "struct", "union":
			if i+2 < len(toks) && isIdent(toks[i+1].text) && toks[i+2].text == "{" {
				kind, tag := toks[i].text, toks[i+1].text
				t := &goType{Name: camel(tag), C: kind + "_" + tag, Header: toks[i].header, tag: kind + "_" + tag}
				end := matchBrace(toks, i+2)
				for j := i + 3; j+1 < end; j++ {
					if k := toks[j].text; (k == "struct" || k == "union") && isIdent(toks[j+1].text) {
						t.refs = append(t.refs, k+"_"+toks[j+1].text)
					}
				}
				types = append(types, t)
				w := walker{toks: toks, root: t}
				w.members(i+3, end, t, kind == "struct", "(("+kind+" "+tag+" *)0)->")
				types = append(types, w.nested...)
			}
		case "enum":
			j := i + 1
			if j < len(toks) && isIdent(toks[j].text) {
				j++
			}
			if j >= len(toks) || toks[j].text != "{" {
				continue
			}
			end := matchBrace(toks, j)
			depth := 0
			expectName := true
			for k := j + 1; k < end; k++ {
				switch t := toks[k].text; {
				case t == "(":
					depth++
				case t == ")":
					depth--
				case t == "," && depth == 0:
					expectName = true
				case expectName && isIdent(t):
					consts = append(consts, constant{Name: t, Header: toks[i].header, pos: 2*k + 1})
					expectName = false
				}
			}
			i = end
		}
	}
	return types, consts
}

// A member is a field of a C struct as godefs sees it: the declarator's
// name, the first member's name for a C11 anonymous union, "" for other
// anonymous members.
type member struct {
	Name     string
	Flex     bool `json:",omitempty"` // flexible array member: name[] or name[0]
	Bitfield bool `json:",omitempty"`

	array bool
}

// A walker walks the body of one tagged struct or union, recording the
// direct members of each struct and naming the anonymous struct types of
// named members.
type walker struct {
	toks   []token
	root   *goType
	nested []*goType
}

// members walks the declarations in toks[lo:hi] (a body without its braces).
// owner is the Go type whose fields they are when direct; expr is the C
// expression prefix reaching them, for __typeof__.
func (w *walker) members(lo, hi int, owner *goType, direct bool, expr string) {
	for i := lo; i < hi; {
		end := w.declEnd(i, hi)
		kind := w.toks[i].text
		if !((kind == "struct" || kind == "union") && w.toks[i+1].text == "{") {
			if direct {
				owner.Fields = append(owner.Fields, declarators(w.toks[i:end])...)
			}
			i = end + 1
			continue
		}
		close := matchBrace(w.toks, i+1)
		decls := declarators(w.toks[close+1 : end])
		if len(decls) == 0 {
			// C11 anonymous member: godefs renders an anonymous union
			// as its first member, and has no name for anything else.
			if direct {
				m := member{}
				if kind == "union" {
					if first := declarators(w.toks[i+2 : w.declEnd(i+2, close)]); len(first) > 0 {
						m = first[0]
					}
				}
				// Last and holding a name[]: a union of flexible
				// arrays (__DECLARE_FLEX_ARRAY), zero-size.
				if end+1 >= hi {
					for j := i + 2; j < close && !m.Flex; j++ {
						m.Flex = w.toks[j].text == "[" && w.toks[j+1].text == "]"
					}
				}
				owner.Fields = append(owner.Fields, m)
			}
			w.members(i+2, close, owner, false, expr)
		}
		var typ *goType
		for _, d := range decls {
			if direct {
				owner.Fields = append(owner.Fields, d)
			}
			e := expr + d.Name
			if d.array {
				e += "[0]"
			}
			switch {
			case strings.HasPrefix(d.Name, "__"):
				// Reserved names, like __DECLARE_FLEX_ARRAY's
				// empty struct: not worth a type.
			case kind == "union":
				// A named union renders as bytes; still name the
				// structs inside it (the union's variants).
				if typ == nil {
					typ = &goType{Name: owner.Name + camel(d.Name)}
					w.members(i+2, close, typ, false, e+".")
				}
			default:
				if typ == nil {
					typ = &goType{Name: owner.Name + camel(d.Name), Header: w.root.Header, parent: w.root}
					typ.C = "abigen_" + typ.Name
					typ.Typedef = "typedef __typeof__(" + e + ") " + typ.C + ";"
					w.nested = append(w.nested, typ)
					w.members(i+2, close, typ, true, e+".")
				}
				if direct {
					owner.Anon = append(owner.Anon, anonRef{d.Name, typ.Name})
				}
			}
		}
		i = end + 1
	}
}

// declEnd returns the index of the ';' ending the declaration at toks[i].
func (w *walker) declEnd(i, hi int) int {
	for depth := 0; i < hi; i++ {
		switch w.toks[i].text {
		case "{", "(", "[":
			depth++
		case "}", ")", "]":
			depth--
		case ";":
			if depth == 0 {
				return i
			}
		}
	}
	return hi
}

// declarators returns the members declared by a member declaration (or by
// the tokens after an anonymous struct's closing brace): the last
// identifier of each comma-separated declarator, skipping array bounds,
// bit widths and attributes.
func declarators(toks []token) []member {
	var ms []member
	var m member
	depth := 0
	for i, t := range toks {
		next := ""
		if i+1 < len(toks) {
			next = toks[i+1].text
		}
		switch {
		case t.text == "(" || t.text == "[" || t.text == "{":
			depth++
		case t.text == ")" || t.text == "]" || t.text == "}":
			depth--
		case depth > 0:
		case t.text == ",":
			if m.Name != "" {
				ms = append(ms, m)
			}
			m = member{}
		case t.text == ":":
			m.Bitfield = true
		case isIdent(t.text) && next != "(":
			m = member{Name: t.text, array: next == "["}
			// name[] or the older name[0]
			m.Flex = m.array && (i+2 < len(toks) && toks[i+2].text == "]" ||
				i+3 < len(toks) && toks[i+2].text == "0" && toks[i+3].text == "]")
		}
	}
	if m.Name != "" {
		ms = append(ms, m)
	}
	return ms
}

func matchBrace(toks []token, open int) int {
	depth := 0
	for i := open; i < len(toks); i++ {
		switch toks[i].text {
		case "{":
			depth++
		case "}":
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return len(toks)
}

func isIdent(s string) bool {
	if s == "" || !(s[0] == '_' || 'a' <= s[0] && s[0] <= 'z' || 'A' <= s[0] && s[0] <= 'Z') {
		return false
	}
	switch s {
	case "struct", "union", "enum", "const", "volatile":
		return false
	}
	return true
}

// camel CamelCases a C name by underscores: ib_uverbs_attr -> IbUverbsAttr.
func camel(s string) string {
	var b strings.Builder
	for _, part := range strings.Split(s, "_") {
		if part != "" {
			b.WriteString(strings.ToUpper(part[:1]) + part[1:])
		}
	}
	return b.String()
}
