//! Value filters, as tiledbsoma's `value_filter` reads them: the one place where soma-mount
//! interprets free text from its users (a `where/<filter>/` path component).
//!
//! A filter is a Boolean expression over a data frame's columns: comparisons (`==`, `!=`,
//! `<`, `<=`, `>`, `>=`, chained as in `1 < n < 5`), `in [..]` and `not in [..]`, joined by
//! `and`, `or` and `not` with Python's precedence, in parentheses where wanted. Values are
//! strings in single or double quotes, integers, floats, `True` and `False` (or `val(..)` of
//! one); a column is a name, or `attr("name")` for a name that is not one. In a path
//! component `/` is written `%2F` and `%` is `%25`. The filter `all` selects every row.
//!
//! [`Filter::parse`] reads a filter and checks it against the frame's schema: every column
//! exists, and every value fits its column's type (an enumerated column compares by label).
//! What it gives is a condition tree whose values are typed for libtiledb, and the filter's
//! normal form, equal for two spellings of one filter. Nothing here panics on any input: a
//! filter that cannot be read is a [`FilterError`] that says what is wrong, and where.

use std::fmt;

use arrow_schema::DataType;

use crate::tiledb::{Comparison, Datatype, Value};

use super::schema::{Column, SomaSchema};

/// The deepest nesting of parentheses and `not` a filter may have.
const MAX_DEPTH: usize = 64;

/// The comparison with its sides swapped: `1 < n` is `n > 1`.
fn swapped(op: Comparison) -> Comparison {
    match op {
        Comparison::Lt => Comparison::Gt,
        Comparison::Le => Comparison::Ge,
        Comparison::Gt => Comparison::Lt,
        Comparison::Ge => Comparison::Le,
        same => same,
    }
}

/// How a comparison is written.
fn op_text(op: Comparison) -> &'static str {
    match op {
        Comparison::Lt => "<",
        Comparison::Le => "<=",
        Comparison::Gt => ">",
        Comparison::Ge => ">=",
        Comparison::Eq => "==",
        Comparison::Ne => "!=",
    }
}

/// A filter checked against a schema: each value typed as its column holds it (the label
/// type for an enumerated column), with the datatype libtiledb compares it in.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    Compare {
        column: String,
        datatype: Datatype,
        op: Comparison,
        value: Value,
    },
    /// `in`, or `not in` when `negated`.
    Member {
        column: String,
        datatype: Datatype,
        negated: bool,
        values: Vec<Value>,
    },
    And(Box<Condition>, Box<Condition>),
    Or(Box<Condition>, Box<Condition>),
    Not(Box<Condition>),
}

/// A value filter read from a path component.
#[derive(Debug, Clone, PartialEq)]
pub struct Filter {
    /// `None`: `all`, every row.
    pub condition: Option<Condition>,
}

/// Why a filter cannot be read: what is wrong, and at which character of the filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterError {
    pub message: String,
    /// The filter as read (percent-decoded where it could be).
    pub filter: String,
    /// The character the message is about, counted from 0.
    pub at: usize,
}

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "this filter cannot be read: {} (at character {})",
            self.message,
            self.at + 1
        )?;
        writeln!(f, "  {}", self.filter)?;
        writeln!(f, "  {}^", " ".repeat(self.at))?;
        write!(
            f,
            "The grammar is tiledbsoma's value_filter: comparisons (== != < <= > >=), \
             `in [..]` and `not in [..]`, joined by `and`, `or` and `not`, with values in \
             quotes, numbers, True and False, and attr(\"name\") for any column name; \
             `/` is written %2F and `%` is %25, and `all` selects every row."
        )
    }
}

impl Filter {
    /// Reads a `where/` path component as a filter over a frame of `schema`.
    pub fn parse(component: &str, schema: &SomaSchema) -> Result<Filter, FilterError> {
        let text = decode(component)?;
        if text.trim() == "all" {
            return Ok(Filter { condition: None });
        }
        let error = |message: String, at: usize| FilterError {
            message,
            filter: text.clone(),
            at,
        };
        let tokens = lex(&text).map_err(|(m, at)| error(m, at))?;
        let mut parser = Parser {
            tokens: &tokens,
            next: 0,
            end: text.chars().count(),
            depth: 0,
        };
        let expr = parser.or_expr().map_err(|(m, at)| error(m, at))?;
        if let Some(token) = parser.peek() {
            let message = format!("unexpected {} after the whole condition", token.kind);
            return Err(error(message, token.at));
        }
        let condition = check(&expr, schema).map_err(|(m, at)| error(m, at))?;
        Ok(Filter {
            condition: Some(condition),
        })
    }

    /// The filter in its normal form: two spellings of one filter (other spaces, quotes,
    /// `attr()` or chained comparisons) have the same.
    pub fn normal_form(&self) -> String {
        match &self.condition {
            None => "all".to_owned(),
            Some(condition) => condition.to_string(),
        }
    }
}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Condition::Compare {
                column, op, value, ..
            } => write!(f, "{} {} {}", quoted(column), op_text(*op), literal(value)),
            Condition::Member {
                column,
                negated,
                values,
                ..
            } => {
                let values: Vec<String> = values.iter().map(literal).collect();
                let op = if *negated { "not in" } else { "in" };
                write!(f, "{} {op} [{}]", quoted(column), values.join(", "))
            }
            Condition::And(a, b) => write!(f, "({a} and {b})"),
            Condition::Or(a, b) => write!(f, "({a} or {b})"),
            Condition::Not(a) => write!(f, "(not {a})"),
        }
    }
}

/// A column's name in the normal form.
fn quoted(column: &str) -> String {
    format!("attr({})", literal(&Value::Text(column.to_owned())))
}

/// A value in the normal form.
fn literal(value: &Value) -> String {
    match value {
        Value::Text(s) => serde_json::to_string(s).unwrap_or_default(),
        Value::Int(i) => i.to_string(),
        Value::UInt(u) => u.to_string(),
        Value::Float(x) => format!("{x:?}"),
        Value::Bool(true) => "True".to_owned(),
        Value::Bool(false) => "False".to_owned(),
        Value::Bytes(b) => format!("{b:?}"),
    }
}

/// A path component with its percent escapes decoded.
fn decode(component: &str) -> Result<String, FilterError> {
    let bytes = component.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'%' {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
            Some(byte) => out.push(byte),
            None => {
                return Err(FilterError {
                    message: "a `%` that is no escape (write `%` as %25, `/` as %2F)".into(),
                    filter: component.to_owned(),
                    at: component[..i].chars().count(),
                })
            }
        }
        i += 3;
    }
    String::from_utf8(out).map_err(|_| FilterError {
        message: "its escapes decode to bytes that are not UTF-8".into(),
        filter: component.to_owned(),
        at: 0,
    })
}

// ---------------------------------------------------------------------------------------
// tokens

#[derive(Debug, Clone, PartialEq)]
enum TokenKind {
    Name(String),
    Text(String),
    Int(i128),
    Float(f64),
    Compare(Comparison),
    And,
    Or,
    Not,
    In,
    True,
    False,
    Open,
    Close,
    OpenList,
    CloseList,
    Comma,
    Minus,
    Plus,
}

impl fmt::Display for TokenKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenKind::Name(n) => write!(f, "the name `{n}`"),
            TokenKind::Text(s) => write!(f, "the string {}", literal(&Value::Text(s.clone()))),
            TokenKind::Int(i) => write!(f, "the number {i}"),
            TokenKind::Float(x) => write!(f, "the number {x}"),
            TokenKind::Compare(op) => write!(f, "`{}`", op_text(*op)),
            TokenKind::And => f.write_str("`and`"),
            TokenKind::Or => f.write_str("`or`"),
            TokenKind::Not => f.write_str("`not`"),
            TokenKind::In => f.write_str("`in`"),
            TokenKind::True => f.write_str("`True`"),
            TokenKind::False => f.write_str("`False`"),
            TokenKind::Open => f.write_str("`(`"),
            TokenKind::Close => f.write_str("`)`"),
            TokenKind::OpenList => f.write_str("`[`"),
            TokenKind::CloseList => f.write_str("`]`"),
            TokenKind::Comma => f.write_str("`,`"),
            TokenKind::Minus => f.write_str("`-`"),
            TokenKind::Plus => f.write_str("`+`"),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Token {
    kind: TokenKind,
    /// The character it starts at.
    at: usize,
}

/// What went wrong, and at which character.
type Failure = (String, usize);

/// The tokens of a filter.
fn lex(text: &str) -> Result<Vec<Token>, Failure> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let at = i;
        let two = |second: char| chars.get(i + 1) == Some(&second);
        let (kind, len) = match c {
            _ if c.is_whitespace() => {
                i += 1;
                continue;
            }
            '(' => (TokenKind::Open, 1),
            ')' => (TokenKind::Close, 1),
            '[' => (TokenKind::OpenList, 1),
            ']' => (TokenKind::CloseList, 1),
            ',' => (TokenKind::Comma, 1),
            '-' => (TokenKind::Minus, 1),
            '+' => (TokenKind::Plus, 1),
            '&' => (TokenKind::And, 1),
            '|' => (TokenKind::Or, 1),
            '=' if two('=') => (TokenKind::Compare(Comparison::Eq), 2),
            '!' if two('=') => (TokenKind::Compare(Comparison::Ne), 2),
            '<' if two('=') => (TokenKind::Compare(Comparison::Le), 2),
            '>' if two('=') => (TokenKind::Compare(Comparison::Ge), 2),
            '<' => (TokenKind::Compare(Comparison::Lt), 1),
            '>' => (TokenKind::Compare(Comparison::Gt), 1),
            '=' => return Err(("`=` assigns; a comparison is `==`".into(), at)),
            '\'' | '"' => {
                let (text, len) = string(&chars[i..]).map_err(|(m, off)| (m, at + off))?;
                (TokenKind::Text(text), len)
            }
            _ if c.is_ascii_digit()
                || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) =>
            {
                number(&chars[i..]).map_err(|m| (m, at))?
            }
            _ if c.is_alphabetic() || c == '_' => {
                let len = chars[i..]
                    .iter()
                    .take_while(|c| c.is_alphanumeric() || **c == '_')
                    .count();
                let word: String = chars[i..i + len].iter().collect();
                let kind = match word.as_str() {
                    "and" => TokenKind::And,
                    "or" => TokenKind::Or,
                    "not" => TokenKind::Not,
                    "in" => TokenKind::In,
                    "True" => TokenKind::True,
                    "False" => TokenKind::False,
                    _ => TokenKind::Name(word),
                };
                (kind, len)
            }
            _ => return Err((format!("`{c}` has no meaning in a filter"), at)),
        };
        tokens.push(Token { kind, at });
        i += len;
    }
    Ok(tokens)
}

/// A quoted string at the start of `chars`: its text, and how many characters it takes.
fn string(chars: &[char]) -> Result<(String, usize), Failure> {
    let quote = chars[0];
    let mut out = String::new();
    let mut i = 1;
    loop {
        let Some(&c) = chars.get(i) else {
            return Err((format!("a string that never ends (no closing {quote})"), 0));
        };
        i += 1;
        if c == quote {
            return Ok((out, i));
        }
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(&escaped) = chars.get(i) else {
            return Err(("a `\\` at the end of a string".into(), i - 1));
        };
        i += 1;
        let hex = |n: usize, i: usize| -> Result<char, Failure> {
            let digits: String = chars.get(i..i + n).unwrap_or(&[]).iter().collect();
            u32::from_str_radix(&digits, 16)
                .ok()
                .filter(|_| digits.len() == n)
                .and_then(char::from_u32)
                .ok_or((format!("`\\{escaped}` takes {n} hex digits"), i - 2))
        };
        match escaped {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            '0' => out.push('\0'),
            '\\' | '\'' | '"' => out.push(escaped),
            'x' => {
                out.push(hex(2, i)?);
                i += 2;
            }
            'u' => {
                out.push(hex(4, i)?);
                i += 4;
            }
            other => {
                out.push('\\');
                out.push(other);
            }
        }
    }
}

/// A number at the start of `chars` (Python's decimal literals: digits with `_` between,
/// a fraction, an exponent), and how many characters it takes.
fn number(chars: &[char]) -> Result<(TokenKind, usize), String> {
    let len = chars
        .iter()
        .enumerate()
        .take_while(|&(k, &c)| {
            c.is_ascii_alphanumeric()
                || c == '_'
                || c == '.'
                || ((c == '+' || c == '-') && k > 0 && matches!(chars[k - 1], 'e' | 'E'))
        })
        .count();
    let text: String = chars[..len].iter().filter(|&&c| c != '_').collect();
    let written: String = chars[..len].iter().collect();
    let bad = || format!("`{written}` is not a number");
    if written.starts_with('_') || written.ends_with('_') || written.contains("__") {
        return Err(bad());
    }
    let is_float = text.contains(['.', 'e', 'E']);
    if !is_float {
        if text.len() > 1 && text.starts_with('0') && text.chars().any(|c| c != '0') {
            return Err(format!("`{written}`: a number does not start with 0"));
        }
        return text
            .parse::<i128>()
            .map(|n| (TokenKind::Int(n), len))
            .map_err(|_| bad());
    }
    let valid = text
        .chars()
        .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'));
    match text.parse::<f64>() {
        Ok(x) if valid && x.is_finite() => Ok((TokenKind::Float(x), len)),
        _ => Err(bad()),
    }
}

// ---------------------------------------------------------------------------------------
// the expression

/// A side of a comparison, where it starts.
#[derive(Debug, Clone, PartialEq)]
enum Operand {
    Column(String, usize),
    Literal(Literal, usize),
}

#[derive(Debug, Clone, PartialEq)]
enum Literal {
    Text(String),
    Int(i128),
    Float(f64),
    Bool(bool),
}

/// A filter as read, before it is checked against a schema.
#[derive(Debug, Clone, PartialEq)]
enum Expr {
    Compare(Operand, Comparison, Operand),
    Member {
        column: (String, usize),
        negated: bool,
        values: Vec<(Literal, usize)>,
    },
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
}

struct Parser<'a> {
    tokens: &'a [Token],
    next: usize,
    /// The character past the last (where "the end" is).
    end: usize,
    depth: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.next)
    }

    fn take(&mut self) -> Option<Token> {
        let token = self.tokens.get(self.next).cloned();
        self.next += usize::from(token.is_some());
        token
    }

    /// Takes the next token if it is `kind`.
    fn take_if(&mut self, kind: &TokenKind) -> bool {
        let found = self.peek().is_some_and(|t| &t.kind == kind);
        self.next += usize::from(found);
        found
    }

    /// Where the next token starts, or the end.
    fn here(&self) -> usize {
        self.peek().map_or(self.end, |t| t.at)
    }

    /// A failure at the next token: `expected`, and what was found instead.
    fn expected(&self, expected: &str) -> Failure {
        match self.peek() {
            Some(token) => (
                format!("expected {expected}, found {}", token.kind),
                token.at,
            ),
            None => (format!("expected {expected}, found the end"), self.end),
        }
    }

    fn deeper(&mut self) -> Result<(), Failure> {
        self.depth += 1;
        match self.depth > MAX_DEPTH {
            true => Err((format!("nested deeper than {MAX_DEPTH}"), self.here())),
            false => Ok(()),
        }
    }

    fn or_expr(&mut self) -> Result<Expr, Failure> {
        let mut expr = self.and_expr()?;
        while self.take_if(&TokenKind::Or) {
            expr = Expr::Or(Box::new(expr), Box::new(self.and_expr()?));
        }
        Ok(expr)
    }

    fn and_expr(&mut self) -> Result<Expr, Failure> {
        let mut expr = self.not_expr()?;
        while self.take_if(&TokenKind::And) {
            expr = Expr::And(Box::new(expr), Box::new(self.not_expr()?));
        }
        Ok(expr)
    }

    fn not_expr(&mut self) -> Result<Expr, Failure> {
        if self.take_if(&TokenKind::Not) {
            self.deeper()?;
            let inner = self.not_expr()?;
            self.depth -= 1;
            return Ok(Expr::Not(Box::new(inner)));
        }
        self.comparison()
    }

    /// A condition in parentheses, a comparison (chained: `a < b < c` is `a < b and b < c`),
    /// or a membership.
    fn comparison(&mut self) -> Result<Expr, Failure> {
        if self.take_if(&TokenKind::Open) {
            self.deeper()?;
            let inner = self.or_expr()?;
            if !self.take_if(&TokenKind::Close) {
                return Err(self.expected("`)`"));
            }
            self.depth -= 1;
            return Ok(inner);
        }
        let first = self.operand()?;
        let negated = match self.peek().map(|t| &t.kind) {
            Some(TokenKind::In) => false,
            Some(TokenKind::Not)
                if self.tokens.get(self.next + 1).map(|t| &t.kind) == Some(&TokenKind::In) =>
            {
                self.next += 1;
                true
            }
            _ => return self.compare_chain(first),
        };
        self.next += 1;
        let (name, at) = match first {
            Operand::Column(name, at) => (name, at),
            Operand::Literal(_, at) => return Err(("`in` needs a column on its left".into(), at)),
        };
        let values = self.list()?;
        Ok(Expr::Member {
            column: (name, at),
            negated,
            values,
        })
    }

    fn compare_chain(&mut self, first: Operand) -> Result<Expr, Failure> {
        let mut left = first;
        let mut expr: Option<Expr> = None;
        while let Some(TokenKind::Compare(op)) = self.peek().map(|t| t.kind.clone()) {
            self.next += 1;
            let right = self.operand()?;
            let compare = Expr::Compare(left, op, right.clone());
            expr = Some(match expr {
                None => compare,
                Some(before) => Expr::And(Box::new(before), Box::new(compare)),
            });
            left = right;
        }
        expr.ok_or_else(|| self.expected("a comparison (== != < <= > >=), `in` or `not in`"))
    }

    /// `[v, …]`: at least one value.
    fn list(&mut self) -> Result<Vec<(Literal, usize)>, Failure> {
        if !self.take_if(&TokenKind::OpenList) {
            return Err(self.expected("a list of values in `[ ]`"));
        }
        let mut values = Vec::new();
        loop {
            if values.is_empty() && self.peek().is_some_and(|t| t.kind == TokenKind::CloseList) {
                return Err(("`in` needs at least one value".into(), self.here()));
            }
            let at = self.here();
            match self.operand()? {
                Operand::Literal(value, at) => values.push((value, at)),
                Operand::Column(name, _) => {
                    return Err((format!("`{name}` in a list: values are in quotes"), at));
                }
            }
            if self.take_if(&TokenKind::CloseList) {
                return Ok(values);
            }
            if !self.take_if(&TokenKind::Comma) {
                return Err(self.expected("`,` or `]`"));
            }
            // A trailing comma, as Python allows.
            if self.take_if(&TokenKind::CloseList) {
                return Ok(values);
            }
        }
    }

    /// A column (a name, or `attr("name")`) or a value (`val(v)` too).
    fn operand(&mut self) -> Result<Operand, Failure> {
        let at = self.here();
        let Some(token) = self.take() else {
            return Err(self.expected("a column or a value"));
        };
        match token.kind {
            // `attr(..)` and `val(..)` when called; a column of that name otherwise.
            TokenKind::Name(name)
                if (name == "attr" || name == "val") && self.take_if(&TokenKind::Open) =>
            {
                let inner = if name == "attr" {
                    match self.take().map(|t| t.kind) {
                        Some(TokenKind::Text(column)) => Operand::Column(column, at),
                        _ => return Err(("attr() takes a column name in quotes".into(), at)),
                    }
                } else {
                    match self.operand()? {
                        literal @ Operand::Literal(..) => literal,
                        Operand::Column(..) => return Err(("val() takes a value".into(), at)),
                    }
                };
                if !self.take_if(&TokenKind::Close) {
                    return Err(self.expected(&format!("`)` to end `{name}(`")));
                }
                Ok(inner)
            }
            TokenKind::Name(name) => Ok(Operand::Column(name, at)),
            TokenKind::Text(s) => Ok(Operand::Literal(Literal::Text(s), at)),
            TokenKind::Int(n) => Ok(Operand::Literal(Literal::Int(n), at)),
            TokenKind::Float(x) => Ok(Operand::Literal(Literal::Float(x), at)),
            TokenKind::True => Ok(Operand::Literal(Literal::Bool(true), at)),
            TokenKind::False => Ok(Operand::Literal(Literal::Bool(false), at)),
            TokenKind::Minus | TokenKind::Plus => {
                self.deeper()?;
                let signed = self.operand()?;
                self.depth -= 1;
                let negate = token.kind == TokenKind::Minus;
                match signed {
                    Operand::Literal(Literal::Int(n), _) => Ok(Operand::Literal(
                        Literal::Int(if negate { -n } else { n }),
                        at,
                    )),
                    Operand::Literal(Literal::Float(x), _) => Ok(Operand::Literal(
                        Literal::Float(if negate { -x } else { x }),
                        at,
                    )),
                    _ => Err(("a sign before something that is no number".into(), at)),
                }
            }
            _ => {
                self.next -= 1;
                Err(self.expected("a column or a value"))
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// the check against the schema

/// What a column compares as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Bool,
    Signed,
    Unsigned,
    Float,
}

/// A column's kind, and the datatype libtiledb compares its values in: an enumerated
/// column's labels.
fn kind_of(column: &Column) -> Option<(Kind, Datatype)> {
    let (arrow, datatype) = match (&column.arrow_type, &column.enumeration) {
        (DataType::Dictionary(_, values), Some(e)) => (values.as_ref().clone(), e.datatype),
        (arrow, _) => (arrow.clone(), column.datatype),
    };
    let kind = match arrow {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Binary | DataType::LargeBinary => {
            Kind::Text
        }
        DataType::Boolean => Kind::Bool,
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => Kind::Signed,
        DataType::Timestamp(..) | DataType::Date32 | DataType::Date64 => Kind::Signed,
        DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => Kind::Unsigned,
        DataType::Float16 | DataType::Float32 | DataType::Float64 => Kind::Float,
        _ => return None,
    };
    Some((kind, datatype))
}

/// `expr` checked against `schema`: its columns found, its values typed.
fn check(expr: &Expr, schema: &SomaSchema) -> Result<Condition, Failure> {
    Ok(match expr {
        Expr::And(a, b) => Condition::And(Box::new(check(a, schema)?), Box::new(check(b, schema)?)),
        Expr::Or(a, b) => Condition::Or(Box::new(check(a, schema)?), Box::new(check(b, schema)?)),
        Expr::Not(a) => Condition::Not(Box::new(check(a, schema)?)),
        Expr::Compare(left, op, right) => {
            let (column, op, value) = match (left, right) {
                (Operand::Column(c, at), Operand::Literal(v, vat)) => ((c, *at), *op, (v, *vat)),
                (Operand::Literal(v, vat), Operand::Column(c, at)) => {
                    ((c, *at), swapped(*op), (v, *vat))
                }
                (Operand::Column(_, _), Operand::Column(other, at)) => {
                    return Err((
                        format!(
                            "`{other}` compared with a column: a value is in quotes, or a number"
                        ),
                        *at,
                    ))
                }
                (Operand::Literal(_, at), Operand::Literal(..)) => {
                    return Err((
                        "a comparison of two values: one side is a column".into(),
                        *at,
                    ))
                }
            };
            let (name, datatype, kind) = column_of(schema, column.0, column.1)?;
            let ordered = |c: &Column| c.enumeration.as_ref().is_none_or(|e| e.ordered);
            let unordered = schema.columns.iter().any(|c| c.name == name && !ordered(c));
            if unordered && !matches!(op, Comparison::Eq | Comparison::Ne) {
                return Err((
                    format!(
                        "`{name}` is categorical without an order: compare it with ==, != or in"
                    ),
                    column.1,
                ));
            }
            Condition::Compare {
                column: name,
                datatype,
                op,
                value: typed(value.0, kind, column.0, value.1)?,
            }
        }
        Expr::Member {
            column,
            negated,
            values,
        } => {
            let (name, datatype, kind) = column_of(schema, &column.0, column.1)?;
            let values = (values.iter())
                .map(|(v, at)| typed(v, kind, &column.0, *at))
                .collect::<Result<Vec<_>, _>>()?;
            Condition::Member {
                column: name,
                datatype,
                negated: *negated,
                values,
            }
        }
    })
}

/// The column named `name`: its name, datatype and kind.
fn column_of(
    schema: &SomaSchema,
    name: &str,
    at: usize,
) -> Result<(String, Datatype, Kind), Failure> {
    let Some(column) = schema.columns.iter().find(|c| c.name == name) else {
        let names: Vec<&str> = schema
            .columns
            .iter()
            .map(|c| c.name.as_str())
            .take(20)
            .collect();
        return Err((
            format!(
                "no column is named `{name}` (the columns: {})",
                names.join(", ")
            ),
            at,
        ));
    };
    let Some((kind, datatype)) = kind_of(column) else {
        return Err((format!("`{name}` is of a type a filter cannot compare"), at));
    };
    Ok((column.name.clone(), datatype, kind))
}

/// A value as a column of `kind` holds it.
fn typed(value: &Literal, kind: Kind, column: &str, at: usize) -> Result<Value, Failure> {
    let wrong = |holds: &str| {
        let value = match value {
            Literal::Text(s) => literal(&Value::Text(s.clone())),
            Literal::Int(n) => n.to_string(),
            Literal::Float(x) => format!("{x:?}"),
            Literal::Bool(b) => literal(&Value::Bool(*b)),
        };
        Err((format!("`{column}` holds {holds}, not {value}"), at))
    };
    let range = |n: i128| Err((format!("{n} is out of the range of `{column}`"), at));
    match (kind, value) {
        (Kind::Text, Literal::Text(s)) => Ok(Value::Text(s.clone())),
        (Kind::Text, _) => wrong("text (a value in quotes)"),
        (Kind::Bool, Literal::Bool(b)) => Ok(Value::Bool(*b)),
        (Kind::Bool, Literal::Int(n @ (0 | 1))) => Ok(Value::Bool(*n == 1)),
        (Kind::Bool, _) => wrong("True or False"),
        (Kind::Float, Literal::Int(n)) => Ok(Value::Float(*n as f64)),
        (Kind::Float, Literal::Float(x)) => Ok(Value::Float(*x)),
        (Kind::Float, Literal::Bool(b)) => Ok(Value::Float(f64::from(u8::from(*b)))),
        (Kind::Float, Literal::Text(_)) => wrong("numbers"),
        (Kind::Signed | Kind::Unsigned, Literal::Text(_)) => wrong("integers"),
        (Kind::Signed | Kind::Unsigned, Literal::Float(x)) if x.fract() != 0.0 => wrong("integers"),
        (Kind::Signed | Kind::Unsigned, Literal::Float(x)) if x.abs() > 2f64.powi(64) => {
            wrong("integers in range")
        }
        (Kind::Signed | Kind::Unsigned, literal) => {
            let n = match literal {
                Literal::Int(n) => *n,
                Literal::Float(x) => *x as i128,
                Literal::Bool(b) => i128::from(*b),
                Literal::Text(_) => unreachable!("text is matched above"),
            };
            match kind {
                Kind::Signed => i64::try_from(n).map(Value::Int).or_else(|_| range(n)),
                _ => u64::try_from(n).map(Value::UInt).or_else(|_| range(n)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soma::fixtures::dataframe;
    use crate::soma::SomaObject;
    use proptest::prelude::*;

    /// The schema of the fixture data frame: `soma_joinid` (int64, index), `x` (float64,
    /// nullable) and `cell_type` (enumerated: `a`, `b/c`).
    fn schema() -> SomaSchema {
        match dataframe("mem://obs", "f") {
            SomaObject::Array(array) => array.schema.clone(),
            SomaObject::Group(_) => unreachable!("dataframe makes an array"),
        }
    }

    fn parse(filter: &str) -> Result<Filter, FilterError> {
        Filter::parse(filter, &schema())
    }

    fn normal(filter: &str) -> String {
        match parse(filter) {
            Ok(f) => f.normal_form(),
            Err(e) => panic!("{filter:?} does not parse: {e}"),
        }
    }

    fn error(filter: &str) -> FilterError {
        match parse(filter) {
            Ok(f) => panic!("{filter:?} parses, as {}", f.normal_form()),
            Err(e) => e,
        }
    }

    #[test]
    fn comparisons_are_typed_as_their_columns_hold_values() {
        let f = parse("x > 1").unwrap();
        assert_eq!(
            f.condition,
            Some(Condition::Compare {
                column: "x".into(),
                datatype: Datatype::Float64,
                op: Comparison::Gt,
                value: Value::Float(1.0),
            })
        );
        // An enumerated column compares by its label, in the labels' datatype.
        let f = parse("cell_type == 'b/c'").unwrap();
        assert_eq!(
            f.condition,
            Some(Condition::Compare {
                column: "cell_type".into(),
                datatype: Datatype::StringUtf8,
                op: Comparison::Eq,
                value: Value::Text("b/c".into()),
            })
        );
        let f = parse("soma_joinid not in [1, 2.0, -3]").unwrap();
        assert_eq!(
            f.condition,
            Some(Condition::Member {
                column: "soma_joinid".into(),
                datatype: Datatype::Int64,
                negated: true,
                values: vec![Value::Int(1), Value::Int(2), Value::Int(-3)],
            })
        );
    }

    #[test]
    fn two_spellings_of_one_filter_have_one_normal_form() {
        let one = normal(r#"cell_type == "a" and x >= 0.5"#);
        assert_eq!(one, normal("attr('cell_type')=='a'   and  0.5 <= x"));
        assert_eq!(one, normal("(cell_type == val('a')) and (x >= .5)"));
        assert_eq!(one, r#"(attr("cell_type") == "a" and attr("x") >= 0.5)"#);
        assert_ne!(one, normal("cell_type == 'a' or x >= 0.5"));
        // A chained comparison is the conjunction of its pairs.
        assert_eq!(normal("1 < x <= 5"), normal("x > 1 and x <= 5"));
        assert_eq!(normal("all"), "all");
        assert_eq!(normal(" all "), "all");
    }

    #[test]
    fn and_binds_tighter_than_or_and_not_tighter_than_and() {
        assert_eq!(
            normal("x == 1 or x == 2 and not x == 3"),
            normal("x == 1 or (x == 2 and (not x == 3))")
        );
        assert_eq!(normal("not not x < 1"), "(not (not attr(\"x\") < 1.0))");
        assert_eq!(
            normal("x < 1 | x > 2 & x != 5"),
            normal("x < 1 or (x > 2 and x != 5)")
        );
    }

    #[test]
    fn percent_escapes_are_decoded_and_strings_take_python_escapes() {
        assert_eq!(
            normal("cell_type == 'b%2Fc'"),
            normal("cell_type == \"b/c\"")
        );
        assert_eq!(
            normal("cell_type == '100%25'"),
            r#"attr("cell_type") == "100%""#
        );
        assert_eq!(
            normal(r#"cell_type == 'it\'s'"#),
            normal(r#"cell_type == "it's""#)
        );
        assert_eq!(
            normal(r#"cell_type == "\x41\u00e9""#),
            normal("cell_type == 'Aé'")
        );
        assert_eq!(
            normal("soma_joinid == 1_000"),
            normal("soma_joinid == 1000")
        );
        // A column may be named attr or val: only a call is special.
        let mut schema = schema();
        schema.columns[1].name = "val".into();
        let named_val = Filter::parse("val >= 2.5 and val(3) > val", &schema).unwrap();
        assert_eq!(
            named_val.normal_form(),
            r#"(attr("val") >= 2.5 and attr("val") < 3.0)"#
        );
    }

    #[test]
    fn a_bad_filter_says_what_is_wrong_and_where() {
        let cases = [
            ("x >", "expected a column or a value, found the end", 3),
            ("nope == 1", "no column is named `nope`", 0),
            ("x == 'a'", "`x` holds numbers, not \"a\"", 5),
            ("cell_type == 1", "`cell_type` holds text", 13),
            ("soma_joinid == 1.5", "holds integers", 15),
            (
                "soma_joinid == 99999999999999999999",
                "out of the range",
                15,
            ),
            ("x = 1", "a comparison is `==`", 2),
            ("x == 1 and", "found the end", 10),
            ("(x == 1", "expected `)`", 7),
            ("x == 1)", "unexpected `)`", 6),
            ("x in []", "at least one value", 6),
            ("x in [1, y]", "values are in quotes", 9),
            ("x == y", "compared with a column", 5),
            ("1 == 2", "one side is a column", 0),
            ("x", "expected a comparison", 1),
            ("'abc", "never ends", 0),
            ("x == 1 %", "no escape", 7),
            ("x ~ 1", "`~` has no meaning", 2),
            ("attr(x) == 1", "attr() takes a column name in quotes", 0),
            ("1 in [1]", "`in` needs a column on its left", 0),
        ];
        for (filter, message, at) in cases {
            let e = error(filter);
            assert!(e.message.contains(message), "{filter:?}: {:?}", e.message);
            assert_eq!(e.at, at, "{filter:?}: {}", e.message);
            let text = e.to_string();
            assert!(text.contains(&e.filter) && text.contains('^'), "{text}");
        }
    }

    #[test]
    fn nesting_is_bounded() {
        let deep = format!("{}x == 1{}", "(".repeat(200), ")".repeat(200));
        assert!(error(&deep).message.contains("nested deeper"));
        let fine = format!("{}x == 1{}", "(".repeat(20), ")".repeat(20));
        assert_eq!(normal(&fine), normal("x == 1"));
        let nots = "not ".repeat(63);
        assert!(parse(&format!("{nots}x == 1")).is_ok());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// No text of a path component's length panics the parser.
        #[test]
        fn any_text_parses_or_fails_without_a_panic(text in "\\PC{0,255}") {
            let _ = parse(&text);
        }

        /// Nor does any sequence of the grammar's own words, where failures are likeliest
        /// to reach deep.
        #[test]
        fn any_sequence_of_tokens_parses_or_fails_without_a_panic(
            words in proptest::collection::vec(
                prop::sample::select(vec![
                    "x", "cell_type", "soma_joinid", "attr(", "val(", "'a'", "\"b%2Fc\"", "1",
                    "-2.5", "1e3", "True", "False", "==", "!=", "<", "<=", ">", ">=", "in",
                    "not", "and", "or", "(", ")", "[", "]", ",", "-", "%25", "all",
                ]),
                0..40,
            )
        ) {
            let text = words.join(" ");
            match parse(&text) {
                Ok(filter) => {
                    // A filter that parses reads back, in its normal form, as itself.
                    let again = parse(&filter.normal_form().replace('%', "%25")).unwrap();
                    prop_assert_eq!(again.normal_form(), filter.normal_form());
                }
                Err(e) => prop_assert!(e.at <= e.filter.chars().count()),
            }
        }
    }
}
