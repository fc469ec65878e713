//! The exporter's sample lines (`monitor/exporter/exposition.py`'s `sample_lines`): one call writes
//! the lines of a block of samples, `f"{name}{label_text} {format_value(value)}\n"` each.
//!
//! Written here: a float `v` with `-1e6 < v < 1e6` as Python's `repr(v)` (the shortest digits that
//! read back as `v`, laid out as `float.__repr__` lays them out: fixed notation for a decimal point
//! position in (-4, 16], else `d.ddde±XX`), an exact int (not a bool) with `-10**15 < v < 10**6` as
//! its digits and `.0`, and one in `[10**6, 10**15)` in Go's exponent form (`1.2345e+06`): what
//! `floatToGoString` writes for each. Any other value is handed to the Python `fallback`
//! (`format_value`); None stays None. zmij (Schubfach) gives the shortest digits that read back as
//! the value, the closest of them, as CPython's `repr` does, and settles an exact tie between two
//! to the even one as CPython does; `even_of_tie` makes sure of the latter whatever the digit
//! generator does (Rust's own `{:e}` takes the upper one). Tests compare the lines with
//! `floatToGoString` on random floats and ints, and on the halfway cases
//! (tests/property/test_exporter_format_props.py).

use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyInt, PyList, PyString};
use std::fmt::Write;

/// `repr(v)` of a float with `|v| < 1e6` (or any finite float whose shortest digits are not a tie),
/// appended to `out` (see the module docstring).
pub fn write_float_repr(out: &mut String, v: f64) {
    let mut buffer = zmij::Buffer::new();
    let (negative, digits, mut exponent) = shortest_digits(buffer.format_finite(v));
    if negative {
        out.push('-');
    }
    let mut digits_text = std::str::from_utf8(&digits.0[..digits.1]).expect("ASCII digits");
    let even;
    if let Some((even_digits, even_exponent)) = even_of_tie(v, digits_text, exponent) {
        even = even_digits;
        digits_text = &even;
        exponent = even_exponent;
    }
    lay_out(out, digits_text, exponent);
}

/// The sign, the significant digits (no leading or trailing zero; "0" for zero) and the power of
/// ten of the first digit of a float as zmij writes it (`-12.5`, `0.001`, `1e+16`, `5e-324`, ...).
fn shortest_digits(text: &str) -> (bool, ([u8; 40], usize), i32) {
    let bytes = text.as_bytes();
    let negative = bytes.first() == Some(&b'-');
    let mut digits = [0u8; 40];
    let (mut n, mut decimals, mut after_point, mut exponent) = (0usize, 0i32, false, 0i32);
    let mut i = usize::from(negative);
    while i < bytes.len() {
        match bytes[i] {
            b'.' => after_point = true,
            b'e' | b'E' => {
                exponent = text[i + 1..].trim_start_matches('+').parse().expect("zmij writes an integer exponent");
                break;
            }
            d => {
                if !(n == 0 && d == b'0') {  // leading zeros carry no digit
                    digits[n] = d;
                    n += 1;
                }
                if after_point {
                    decimals += 1;
                }
            }
        }
        i += 1;
    }
    let mut last = exponent - decimals; // the power of ten of the last digit kept
    while n > 0 && digits[n - 1] == b'0' {
        n -= 1;
        last += 1;
    }
    if n == 0 {
        digits[0] = b'0';
        return (negative, (digits, 1), 0);
    }
    (negative, (digits, n), last + n as i32 - 1)
}

/// Python's choice where the shortest digits are a tie: CPython's `repr` (dtoa mode 0) takes the one
/// of two equally close shortest strings with an even last digit.
/// Returns that one's digits and exponent when it differs from zmij's and reads back as `v`, else None.
///
/// A tie needs the exact value to have one digit more than the shortest, a 5: `v = m / 2**f` exactly
/// (`m` odd) has `f` decimals, its digits are `m * 5**f`; beyond 25 decimals those are more than the
/// 18 digits a tie of at most 17 shortest digits allows. An integral `v` below 2**53 is its own
/// shortest digits (no tie); a larger one is not looked at (callers hand |v| >= 1e6 to Python).
fn even_of_tie(v: f64, digits: &str, exponent: i32) -> Option<(String, i32)> {
    let bits = v.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i32;
    let fraction = bits & ((1u64 << 52) - 1);
    let (mut m, mut e) = if biased == 0 { (fraction, -1074) } else { (fraction | (1u64 << 52), biased - 1075) };
    if m == 0 {
        return None;
    }
    let zeros = m.trailing_zeros();
    m >>= zeros;
    e += zeros as i32;
    if e >= 0 || e < -25 {
        return None;
    }
    let decimals = -e; // of the exact value
    let last = exponent - (digits.len() as i32 - 1); // the power of ten of the shortest's last digit
    if decimals != -last + 1 {
        return None;
    }
    let exact = (m as u128) * 5u128.pow(decimals as u32);
    if exact % 10 != 5 {
        return None;
    }
    let lower = exact / 10;
    let even = if lower % 2 == 0 { lower } else { lower + 1 };
    let mut text = even.to_string();
    let mut power = last;
    while text.len() > 1 && text.ends_with('0') {
        text.pop();
        power += 1;
    }
    let even_exponent = power + text.len() as i32 - 1;
    if text == digits && even_exponent == exponent {
        return None;
    }
    let back: f64 = format!("{text}e{power}").parse().ok()?;
    (back == v.abs()).then_some((text, even_exponent))
}

/// Shortest `digits` of a value `d.ddd * 10**exponent` laid out as `float.__repr__` lays them out.
fn lay_out(out: &mut String, digits: &str, exponent: i32) {
    let n = digits.len() as i32;
    let decpt = exponent + 1; // the value is 0.<digits> * 10**decpt, as dtoa reports it
    if decpt <= -4 || decpt > 16 {
        out.push_str(&digits[..1]);
        if n > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let sign = if exponent < 0 { '-' } else { '+' };
        write!(out, "e{sign}{:02}", exponent.abs()).expect("writing to a String");
    } else if decpt <= 0 {
        out.push_str("0.");
        for _ in 0..-decpt {
            out.push('0');
        }
        out.push_str(digits);
    } else if decpt >= n {
        out.push_str(digits);
        for _ in 0..decpt - n {
            out.push('0');
        }
        out.push_str(".0");
    } else {
        out.push_str(&digits[..decpt as usize]);
        out.push('.');
        out.push_str(&digits[decpt as usize..]);
    }
}

/// The value's text when written here, None when the fallback writes it.
fn write_value(out: &mut String, value: &Bound<'_, PyAny>) -> bool {
    if value.is_exact_instance_of::<PyFloat>() {
        let v = value.cast::<PyFloat>().expect("checked").value();
        if -1e6 < v && v < 1e6 {  // nan fails both; so do the ties beyond 2**53 even_of_tie leaves alone
            write_float_repr(out, v);
            return true;
        }
    } else if value.is_exact_instance_of::<PyInt>() {
        if let Ok(v) = value.extract::<i64>() {
            if -1_000_000_000_000_000 < v && v < 1_000_000 {
                write!(out, "{v}.0").expect("writing to a String");
                return true;
            }
            if (1_000_000..1_000_000_000_000_000).contains(&v) {
                // floatToGoString: repr(float(v)) is its digits and ".0" (exact below 2**53), written
                // as Go does past 1e6: "1234500" -> "1.2345e+06"
                let digits = v.to_string();
                let rest = digits[1..].trim_end_matches('0');
                out.push_str(&digits[..1]);
                if !rest.is_empty() {
                    out.push('.');
                    out.push_str(rest);
                }
                write!(out, "e+{:02}", digits.len() - 1).expect("writing to a String");
                return true;
            }
        }
    }
    false
}

/// `[f"{name}{text} {fallback(value)}\n" or None for a None value, ...]` over `zip(names,
/// label_texts, values)` (shortest sequence); `label_texts` may be one str for every line.
#[pyfunction]
fn sample_lines<'py>(names: &Bound<'py, PyAny>, label_texts: &Bound<'py, PyAny>, values: &Bound<'py, PyAny>,
                     fallback: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
    let py = names.py();
    let one_text = label_texts.cast::<PyString>().ok().map(|s| s.to_str()).transpose()?;
    let mut texts = if one_text.is_none() { Some(label_texts.try_iter()?) } else { None };
    let out = PyList::empty(py);
    let mut line = String::with_capacity(256);
    for (name, value) in names.try_iter()?.zip(values.try_iter()?) {
        let (name, value) = (name?, value?);
        let owned_text;
        let text = match (&one_text, &mut texts) {
            (Some(text), _) => *text,
            (None, Some(iter)) => match iter.next() {
                Some(text) => {
                    owned_text = text?;
                    owned_text.cast::<PyString>()?.to_str()?
                }
                None => break,
            },
            (None, None) => unreachable!("one of the two is set"),
        };
        if value.is_none() {
            out.append(py.None())?;
            continue;
        }
        line.clear();
        line.push_str(name.cast::<PyString>()?.to_str()?);
        line.push_str(text);
        line.push(' ');
        if !write_value(&mut line, &value) {
            let written = fallback.call1((&value,))?;
            line.push_str(written.cast::<PyString>()?.to_str()?);
        }
        line.push('\n');
        out.append(PyString::new(py, &line))?;
    }
    Ok(out)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(sample_lines, m)?)
}

#[cfg(test)]
mod tests {
    use super::{even_of_tie, write_float_repr};

    fn repr(v: f64) -> String {
        let mut s = String::new();
        write_float_repr(&mut s, v);
        s
    }

    #[test]
    fn lays_digits_out_as_python_repr() {
        for (v, want) in [(0.0, "0.0"), (-0.0, "-0.0"), (1.0, "1.0"), (0.1, "0.1"), (1e-4, "0.0001"),
                          (1e-5, "1e-05"), (1.5e-7, "1.5e-07"), (123456.75, "123456.75"),
                          (1e15, "1000000000000000.0"), (1e16, "1e+16"), (-1.25e22, "-1.25e+22"),
                          (5e-324, "5e-324"), (1e-320, "1e-320"), (0.30000000000000004, "0.30000000000000004"),
                          (524288.0 + 1.0 / 2048.0, "524288.0004882812"), (100000.0 + 1.0 / 16384.0, "100000.00006103516")] {
            assert_eq!(repr(v), want, "{v:e}");
        }
    }

    #[test]
    fn settles_a_tie_to_the_even_digit() {
        // 524288 + 2**-11 = 524288.00048828125: ...812 and ...813 are equally close; Rust's {:e} says 813
        let v = 524288.0 + 1.0 / 2048.0;
        assert_eq!(format!("{v:e}"), "5.242880004882813e5");
        assert_eq!(even_of_tie(v, "5242880004882813", 5), Some(("5242880004882812".to_string(), 5)));
        assert_eq!(even_of_tie(v, "5242880004882812", 5), None);
        assert_eq!(even_of_tie(0.1, "1", -1), None);
    }
}
