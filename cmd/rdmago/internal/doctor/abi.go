package doctor

// The kernel ABI check of "rdmago doctor": the structs and enums of
// internal/abi were generated from one version of the uapi headers; the
// running kernel describes its own in BTF (/sys/kernel/btf/vmlinux and, as
// split BTF on top of it, one file per module). Where the kernel's BTF has
// a struct, its size and the offsets and sizes of the members both sides
// name are compared with the Go type; where it has an enum, its values are
// compared with the generated constants of the same names.
//
// BTF carries only the types a module's code uses, so many uapi structs
// (and every #define) are absent from it; those are counted as "not in the
// kernel's BTF" rather than passed.
//
// What counts as a mismatch: a member both sides name at a different
// offset or with a different size, or an enumerator with a different
// value. Not mismatches: a reserved member of another size (new members
// were carved out of it), an enumerator that counts the others (..._MAX),
// and a struct whose size differs while its common members agree (the
// ABI extended it at its end);
// the uverbs ABI passes lengths with every command so that both sides
// accept the other's shorter or longer version, so this is reported, not
// counted as a mismatch.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/cilium/ebpf/btf"
)

// abiType is a generated struct and the C struct it was generated from.
type abiType struct {
	C  string // the C tag: "ib_uverbs_cmd_hdr" for struct ib_uverbs_cmd_hdr
	Go reflect.Type
}

// abiConst is a generated constant; its name is the C enumerator's or macro's.
type abiConst struct {
	Name  string
	Value int64
}

// abiModules are the modules whose BTF is compared, those the library's
// calls reach: the verbs and rdma_cm interfaces and its two providers.
var abiModules = []string{"ib_uverbs", "rdma_ucm", "rdma_rxe", "mlx5_ib"}

// typeResult is the outcome of comparing one type with one BTF.
type typeResult struct {
	C          string
	Where      string   // the BTF it was found in; "" if in none
	Mismatches []string // empty when the layouts agree
	SizeNote   string   // sizes differ but the common members agree
	Reserved   []string // reserved members of another size: new members were carved out of them
	OnlyGo     []string // members only the Go type has
	OnlyC      []string // members only the kernel's type has
}

// abiReport is what the ABI check found.
type abiReport struct {
	Sources       []string // the BTF files read: "vmlinux", "ib_uverbs", ...
	Types         []typeResult
	EnumCompared  int
	EnumSentinels int // enumerators that count the others, not compared
	EnumMismatch  []string
	PerSource     map[string]int // types compared in each source
}

// loadKernelBTF loads vmlinux's BTF and the split BTF of each of
// abiModules that has one. A missing module file is not an error: the
// module is not loaded, or the kernel was built without module BTF.
func loadKernelBTF(sysRoot string) (vmlinux *btf.Spec, mods map[string]*btf.Spec, missing []string, err error) {
	dir := filepath.Join(sysRoot, "kernel", "btf")
	vmlinux, err = btf.LoadSpec(filepath.Join(dir, "vmlinux"))
	if err != nil {
		return nil, nil, nil, err
	}
	mods = map[string]*btf.Spec{}
	for _, m := range abiModules {
		p := filepath.Join(dir, m)
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, m)
			continue
		}
		s, err := btf.LoadSplitSpec(p, vmlinux)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%s: %w", p, err)
		}
		mods[m] = s
	}
	return vmlinux, mods, missing, nil
}

// namedSource is one BTF to look types up in.
type namedSource struct {
	name string
	spec *btf.Spec
}

// compareABI compares the table with the BTF sources, in order: a type is
// compared with the first source that has it.
func compareABI(sources []namedSource, types []abiType, consts []abiConst) abiReport {
	r := abiReport{PerSource: map[string]int{}}
	for _, s := range sources {
		r.Sources = append(r.Sources, s.name)
	}
	for _, t := range types {
		res := typeResult{C: t.C}
		for _, s := range sources {
			ct := findStruct(s.spec, t.C)
			if ct == nil {
				continue
			}
			res.Where = s.name
			r.PerSource[s.name]++
			compareStruct(&res, t.Go, ct)
			break
		}
		r.Types = append(r.Types, res)
	}
	want := map[string]int64{}
	for _, c := range consts {
		want[c.Name] = c.Value
	}
	seen := map[string]bool{}
	for _, s := range sources {
		for typ, err := range s.spec.All() {
			if err != nil {
				break
			}
			e, ok := typ.(*btf.Enum)
			if !ok {
				continue
			}
			for _, v := range e.Values {
				w, ok := want[v.Name]
				if !ok || seen[v.Name] {
					continue
				}
				seen[v.Name] = true
				if isSentinel(v.Name) {
					r.EnumSentinels++
					continue
				}
				r.EnumCompared++
				if !enumEqual(w, v.Value, e.Size) {
					r.EnumMismatch = append(r.EnumMismatch, fmt.Sprintf("%s is %d in the kernel (%s), %d in rdmago", v.Name, int64(v.Value), s.name, w))
				}
			}
		}
	}
	return r
}

// enumEqual compares a generated value with a BTF enumerator, which BTF
// stores zero-extended from the enum's size.
func enumEqual(want int64, got uint64, size uint32) bool {
	if size > 0 && size < 8 {
		mask := uint64(1)<<(8*size) - 1
		return uint64(want)&mask == got&mask
	}
	return uint64(want) == got
}

// findStruct returns the struct (or union) named name in spec, or nil.
func findStruct(spec *btf.Spec, name string) btf.Type {
	ts, err := spec.AnyTypesByName(name)
	if err != nil {
		return nil
	}
	for _, t := range ts {
		switch t := t.(type) {
		case *btf.Struct:
			return t
		case *btf.Union:
			return t
		}
	}
	return nil
}

// cMember is a member of a C struct, with anonymous members flattened.
type cMember struct {
	offset uint32 // bytes
	size   int    // bytes; -1 when unknown or a bit field
}

func cMembers(t btf.Type, base uint32, out map[string]cMember, order *[]string) {
	var ms []btf.Member
	switch t := t.(type) {
	case *btf.Struct:
		ms = t.Members
	case *btf.Union:
		ms = t.Members
	default:
		return
	}
	for _, m := range ms {
		off := base + m.Offset.Bytes()
		if m.Name == "" {
			cMembers(btf.UnderlyingType(m.Type), off, out, order)
			continue
		}
		size := -1
		if m.BitfieldSize == 0 {
			if n, err := btf.Sizeof(m.Type); err == nil {
				size = n
			}
		}
		if _, dup := out[m.Name]; !dup {
			out[m.Name] = cMember{offset: off, size: size}
			*order = append(*order, m.Name)
		}
	}
}

// cNameOfField maps a godefs field name back to the C member's: godefs
// capitalizes the first letter and writes a leading underscore as "X_".
// Padding godefs inserted, and anonymous unions it rendered as byte
// arrays, have no C name ("").
func cNameOfField(name string) string {
	switch {
	case name == "_", strings.HasPrefix(name, "Pad_cgo_"), strings.HasPrefix(name, "Anon"):
		return ""
	case strings.HasPrefix(name, "X_"):
		return name[1:]
	}
	return strings.ToLower(name[:1]) + name[1:]
}

// isReserved reports whether a member only holds space for later use.
func isReserved(name string) bool {
	n := strings.TrimLeft(name, "_")
	return strings.HasPrefix(n, "reserved") || strings.HasPrefix(n, "pad")
}

// isSentinel reports whether an enumerator counts the others
// (RDMA_NLDEV_ATTR_MAX, __RDMA_NLDEV_ATTR_MAX...): it grows with every
// value a kernel adds, by design, and no call passes it to the kernel.
func isSentinel(name string) bool {
	return strings.HasPrefix(name, "__") || strings.HasSuffix(name, "_MAX") || strings.HasSuffix(name, "_LAST")
}

func compareStruct(res *typeResult, goT reflect.Type, ct btf.Type) {
	cm := map[string]cMember{}
	var order []string
	cMembers(ct, 0, cm, &order)
	matched := map[string]bool{}
	for i := range goT.NumField() {
		f := goT.Field(i)
		n := cNameOfField(f.Name)
		if n == "" {
			continue
		}
		c, ok := cm[n]
		if !ok {
			res.OnlyGo = append(res.OnlyGo, n)
			continue
		}
		matched[n] = true
		if uintptr(c.offset) != f.Offset {
			res.Mismatches = append(res.Mismatches, fmt.Sprintf("%s at offset %d in the kernel, %d in rdmago", n, c.offset, f.Offset))
		}
		// A flexible array godefs kept as [0]T, or a bit field, has no size to compare.
		if c.size >= 0 && f.Type.Size() != 0 && uintptr(c.size) != f.Type.Size() {
			d := fmt.Sprintf("%s is %d bytes in the kernel, %d in rdmago", n, c.size, f.Type.Size())
			if isReserved(n) {
				// New members are carved out of reserved bytes
				// (ib_uverbs_query_port_resp_ex's active_speed_ex): a
				// kernel that predates them leaves those bytes zero.
				res.Reserved = append(res.Reserved, d)
			} else {
				res.Mismatches = append(res.Mismatches, d)
			}
		}
	}
	for _, n := range order {
		if !matched[n] {
			res.OnlyC = append(res.OnlyC, n)
		}
	}
	csize, err := btf.Sizeof(ct)
	if err == nil && uintptr(csize) != goT.Size() {
		res.SizeNote = fmt.Sprintf("%d bytes in the kernel, %d in rdmago", csize, goT.Size())
	}
}

// checkABI loads the kernel's BTF and compares it with the generated ABI.
func checkABI(env *doctorEnv) []finding {
	const check = "kernel ABI"
	vmlinux, mods, missing, err := loadKernelBTF(env.sysRoot)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return []finding{{Check: check, Status: statusNotChecked,
				Text: "the kernel has no BTF (" + filepath.Join(env.sysRoot, "kernel/btf/vmlinux") + " is missing: built without CONFIG_DEBUG_INFO_BTF)"}}
		}
		return []finding{{Check: check, Status: statusNotChecked, Text: "cannot read the kernel's BTF: " + err.Error()}}
	}
	var sources []namedSource
	for _, m := range abiModules {
		if s := mods[m]; s != nil {
			sources = append(sources, namedSource{m, s})
		}
	}
	sources = append(sources, namedSource{"vmlinux", vmlinux})
	r := compareABI(sources, abiTypes, abiConsts)
	out := abiFindings(r, missing)
	if env.verbose {
		for _, d := range abiDetails(r) {
			out = append(out, finding{Check: check + " type", Status: statusInfo, Text: d})
		}
	}
	return out
}

// abiFindings turns a report into findings: one per BTF source with its
// count, one per mismatching type, and a summary.
func abiFindings(r abiReport, missingModules []string) []finding {
	const check = "kernel ABI"
	var out []finding
	for _, s := range r.Sources {
		out = append(out, finding{Check: check, Status: statusInfo,
			Text: fmt.Sprintf("%s: %d of the generated types found in its BTF and compared", s, r.PerSource[s])})
	}
	if len(missingModules) > 0 {
		out = append(out, finding{Check: check, Status: statusInfo,
			Text: "no module BTF for " + strings.Join(missingModules, ", ") + " (not loaded, or the kernel has no module BTF)"})
	}
	var compared, notFound, sized int
	var bad []typeResult
	for _, t := range r.Types {
		switch {
		case t.Where == "":
			notFound++
			continue
		case len(t.Mismatches) > 0:
			bad = append(bad, t)
		case t.SizeNote != "" || len(t.Reserved) > 0:
			sized++
		}
		compared++
	}
	for _, t := range bad {
		out = append(out, finding{Check: check, Status: statusProblem,
			Text: fmt.Sprintf("struct %s (%s) differs from the kernel's: %s", t.C, t.Where, strings.Join(t.Mismatches, "; ")),
			Fix:  "this rdmago was generated from other kernel headers than this kernel's, and they disagree: report it, with uname -r"})
	}
	for _, m := range r.EnumMismatch {
		out = append(out, finding{Check: check, Status: statusProblem, Text: "enum value " + m,
			Fix: "this rdmago was generated from other kernel headers than this kernel's, and they disagree: report it, with uname -r"})
	}
	text := fmt.Sprintf("%d of %d types compared (%d differ only where the ABI was extended), %d not in the kernel's BTF, "+
		"%d mismatches; %d enum values compared (and %d ..._MAX counts left out), %d mismatches",
		compared, len(r.Types), sized, notFound, len(bad), r.EnumCompared, r.EnumSentinels, len(r.EnumMismatch))
	st := statusOK
	if len(bad) > 0 || len(r.EnumMismatch) > 0 {
		st = statusProblem
	}
	if compared == 0 && r.EnumCompared == 0 {
		st = statusNotChecked
		text = "none of the generated types or enums is in the kernel's BTF (are ib_uverbs and rdma_ucm loaded?)"
	}
	return append(out, finding{Check: check, Status: st, Text: text})
}

// abiDetails lists, per type, where it was compared and what differs: the
// output of "rdmago doctor -v".
func abiDetails(r abiReport) []string {
	var out []string
	for _, t := range r.Types {
		var b strings.Builder
		fmt.Fprintf(&b, "struct %s: ", t.C)
		if t.Where == "" {
			b.WriteString("not in the kernel's BTF")
			out = append(out, b.String())
			continue
		}
		fmt.Fprintf(&b, "compared (%s)", t.Where)
		if len(t.Mismatches) > 0 {
			fmt.Fprintf(&b, ", MISMATCH: %s", strings.Join(t.Mismatches, "; "))
		}
		if t.SizeNote != "" {
			fmt.Fprintf(&b, ", size %s", t.SizeNote)
		}
		if len(t.Reserved) > 0 {
			fmt.Fprintf(&b, ", extended into reserved space: %s", strings.Join(t.Reserved, "; "))
		}
		if len(t.OnlyGo) > 0 {
			fmt.Fprintf(&b, ", only in rdmago: %s", strings.Join(t.OnlyGo, " "))
		}
		if len(t.OnlyC) > 0 {
			fmt.Fprintf(&b, ", only in the kernel: %s", strings.Join(t.OnlyC, " "))
		}
		out = append(out, b.String())
	}
	slices.Sort(out)
	return out
}
