package tools

import (
	"reflect"
	"testing"
)

type scalarMode string

type scalarArgs struct {
	S    string     `json:"s"`
	I    int        `json:"i,omitempty"`
	I8   int8       `json:"i8"`
	U16  uint16     `json:"u16"`
	U    uint       `json:"u"`
	F32  float32    `json:"f32"`
	F    float64    `json:"f"`
	B    bool       `json:"b"`
	Mode scalarMode `json:"mode"`
	Bare int
	skip int
	Dash int `json:"-"`
}

var scalarSeeds = []string{`{}`, ` { } `, `{"s":"a","i":-12,"i8":-128,"u16":65535,"u":0,"f32":1.5,"f":-0.0,"b":true,"mode":"x","Bare":3}`,
	`{"i8":128}`, `{"u16":65536}`, `{"u":-0}`, `{"i":-0}`, `{"i":01}`, `{"i":1.0}`, `{"i":1e2}`, `{"f":1e400}`, `{"f32":3.5e38}`,
	`{"i":9223372036854775807}`, `{"i":-9223372036854775808}`, `{"i":9223372036854775808}`, `{"u":18446744073709551616}`,
	`{"s":"é😀"}`, "{\"s\":\"\xff\"}", `{"s":"a\"b"}`, `{"s":"\u0061"}`, `{"s":null,"b":null,"i":null}`, `{"b":"true"}`,
	`{"s":1}`, `{"i":"1"}`, `{"S":"a"}`, `{"s":"a","s":"b"}`, `{"bare":1}`, `{"skip":1}`, `{"Dash":1}`, `{"-":1}`,
	`{"s":"a",}`, `{"s":"a"} x`, `{"s":"a"`, `{"s" "a"}`, `[1]`, `null`, `{"b":tru}`, `{"b":truex}`, `{"i":-}`, `{"f":.5}`,
	`{"f":5.}`, `{"f":1e}`, `{"f":1E+2}`, "{\"s\":\"a\tb\"}", "{\n\"s\" :\r\"a\"\t}"}

// The scalar path accepts only what the full path accepts, with the same
// value.
func FuzzDecodeScalars(f *testing.F) {
	for _, s := range scalarSeeds {
		f.Add([]byte(s))
	}
	p := scalarPlanOf(reflect.TypeFor[scalarArgs]())
	if p == nil {
		f.Fatal("no scalar plan for scalarArgs")
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast scalarArgs
		if decodeScalars(data, p, reflect.ValueOf(&fast).Elem()) {
			agreesWithFull(t, "scalar", data, fast)
		}
	})
}

// TestDecodeScalars: the scalar path takes plain flat arguments, leaves
// everything else to the other paths (which give the same results as
// before), and is planned only for structs of plain scalars.
func TestDecodeScalars(t *testing.T) {
	p := scalarPlanOf(reflect.TypeFor[scalarArgs]())
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{`{}`, true}, {`{"s":"a","i":-12,"b":false,"Bare":1}`, true}, {`{"i8":-128,"u16":65535}`, true},
		{`{"f32":1.5,"f":-2e-3}`, true}, {`{"s":null}`, true}, {`{"f":1.5e+3}`, true}, {`{"f":1.}`, false}, {`{"f":1e}`, false}, {`{"f":1.e3}`, false},
		{`{"i8":128}`, false}, {`{"u":-0}`, false}, {`{"s":"a\"b"}`, false}, {`{"i":"1"}`, false}, {`{"S":"a"}`, false},
		{`{"s":"a","s":"b"}`, false}, {`{"skip":1}`, false}, {`{"s":"a",}`, false}, {`{"s":"a"} x`, false}, {`null`, false},
	} {
		var a scalarArgs
		if ok := decodeScalars([]byte(tc.in), p, reflect.ValueOf(&a).Elem()); ok != tc.ok {
			t.Errorf("decodeScalars(%s) = %v, want %v", tc.in, ok, tc.ok)
		}
		// Whatever path decides, decodeArgs answers as the full path does.
		got, gp := decodeArgs[scalarArgs]([]byte(tc.in), nil)
		want, wp := decodeFull[scalarArgs]([]byte(tc.in), nil)
		if gp != wp || !reflect.DeepEqual(got, want) {
			t.Errorf("decodeArgs(%s) = %+v %q, full path %+v %q", tc.in, got, gp, want, wp)
		}
	}
	for name, typ := range map[string]reflect.Type{
		"pointer":  reflect.TypeFor[struct{ P *int }](),
		"embedded": reflect.TypeFor[struct{ scalarMode }](),
		"string": reflect.TypeFor[struct {
			N int `json:"n,string"`
		}](),
		"slice": reflect.TypeFor[struct{ L []int }](),
		"shared": reflect.TypeFor[struct {
			A int
			B int `json:"A"`
		}](),
		"not a struct": reflect.TypeFor[int](),
	} {
		if scalarPlanOf(typ) != nil {
			t.Errorf("%s: a scalar plan for %v", name, typ)
		}
	}
	if allocs := testing.AllocsPerRun(100, func() {
		decodeArgs[struct {
			I int `json:"i"`
		}]([]byte(`{"i":3}`), nil)
	}); allocs > 1 {
		t.Errorf("decodeArgs of {\"i\":3}: %.0f allocations, want at most 1", allocs)
	}
}
