//! Network egress rules for sandboxed commands (issue 33's policy half): which domains a
//! run may reach through Warden's proxy. A rule is a host — an exact name, `*.suffix`
//! (any name below the suffix, never the suffix itself), or an IP literal — with an
//! optional port. Deny wins over allow; a host no rule names is unknown (the caller asks
//! or refuses). Names are compared as DNS compares them: ASCII case folded, one trailing
//! dot dropped; anything that is not a plain hostname (an empty label, a label over 63
//! bytes, characters outside letters, digits and `-`, non-ASCII — use punycode) is
//! refused when the rule is read, so a rule never means something its text does not.

use std::fmt;
use std::net::IpAddr;

/// The host part of a rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostPattern {
    /// Exactly this name.
    Exact(String),
    /// Any name strictly below this suffix (`*.example.com`: `a.example.com`,
    /// `a.b.example.com`, never `example.com`).
    Below(String),
    /// Exactly this address (the only way a loopback, private, link-local or metadata
    /// address is reached).
    Address(IpAddr),
}

/// One rule: a host pattern and, optionally, the one port it covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainRule {
    /// Which hosts.
    pub host: HostPattern,
    /// Which port (`None`: any).
    pub port: Option<u16>,
}

/// Why a rule's text is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("egress rule {text:?}: {problem}")]
pub struct RuleError {
    /// The rule as written.
    pub text: String,
    /// What is wrong with it.
    pub problem: String,
}

/// What the rules say about one host and port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A deny rule names it (whatever the allow rules say).
    Denied(DomainRule),
    /// An allow rule names it, and no deny rule does.
    Allowed(DomainRule),
    /// No rule names it: ask, or refuse.
    Unknown,
    /// It is not a host name or an address at all (why): no rule can name it, and
    /// nobody should be asked about it.
    NotAHost(String),
}

/// A run's egress rules.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EgressRules {
    /// What may be reached.
    pub allow: Vec<DomainRule>,
    /// What may never be reached.
    pub deny: Vec<DomainRule>,
}

impl EgressRules {
    /// What the rules say about `host` (a name as a client wrote it, or an address) on
    /// `port`. A name that is not a plain hostname is never allowed.
    pub fn verdict(&self, host: &str, port: u16) -> Verdict {
        let target = match Target::parse(host) {
            Ok(target) => target,
            Err(why) => return Verdict::NotAHost(why),
        };
        if let Some(rule) = self.deny.iter().find(|r| r.matches(&target, port)) {
            return Verdict::Denied(rule.clone());
        }
        match self.allow.iter().find(|r| r.matches(&target, port)) {
            Some(rule) => Verdict::Allowed(rule.clone()),
            None => Verdict::Unknown,
        }
    }
}

/// A request's own egress rules (the exec request's `egress` parameter): they only ever
/// narrow what the host's rules allow — `allow` limits the run to the hosts it names
/// (each still reached only as the host's rules, its `egressAllow` or its approver
/// allow), `deny` adds hosts the run never reaches. Each rule is checked, and kept in its
/// normal form, when the request is read.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestEgress {
    /// The only hosts the run may reach (`None`: no narrowing; `null` is refused, as
    /// everywhere in a request).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "listed"
    )]
    pub allow: Option<Vec<RuleText>>,
    /// Hosts the run never reaches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<RuleText>,
}

/// One rule's text, read as a [`DomainRule`] and kept in its normal form.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(transparent)]
pub struct RuleText(String);

impl RuleText {
    /// `text` as a rule, in its normal form, or why it is not one.
    pub fn parse(text: &str) -> Result<RuleText, RuleError> {
        DomainRule::parse(text).map(|rule| RuleText(rule.to_string()))
    }

    /// The rule (its normal form always reads back).
    pub fn rule(&self) -> Option<DomainRule> {
        DomainRule::parse(&self.0).ok()
    }

    /// As written in normal form.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> serde::Deserialize<'de> for RuleText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        RuleText::parse(&text).map_err(|e| serde::de::Error::custom(e.problem))
    }
}

/// A list that is present: a value, never `null`.
fn listed<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<RuleText>>, D::Error> {
    <Vec<RuleText> as serde::Deserialize>::deserialize(d).map(Some)
}

impl RequestEgress {
    /// The rules, each parsed: (the allow list if any, the deny list). A [`RuleText`] is
    /// only ever made by reading a rule, so each reads back; should one not, `None` —
    /// and the caller refuses everything rather than drop a rule.
    #[allow(clippy::type_complexity)]
    pub fn rules(&self) -> Option<(Option<Vec<DomainRule>>, Vec<DomainRule>)> {
        let parsed = |list: &[RuleText]| list.iter().map(RuleText::rule).collect::<Option<_>>();
        let allow = match self.allow.as_deref() {
            Some(list) => Some(parsed(list)?),
            None => None,
        };
        Some((allow, parsed(&self.deny)?))
    }

    /// Whether it narrows anything at all.
    pub fn is_empty(&self) -> bool {
        self.allow.is_none() && self.deny.is_empty()
    }
}

/// A host being checked: a normalised name or an address.
enum Target {
    Name(String),
    Address(IpAddr),
}

impl Target {
    fn parse(host: &str) -> Result<Target, String> {
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return Ok(Target::Address(ip));
        }
        normalise_name(host).map(Target::Name)
    }
}

impl DomainRule {
    /// Read `text`: `example.com`, `*.example.com`, `example.com:443`, `10.0.0.5`,
    /// `[fd00::1]:8080`.
    pub fn parse(text: &str) -> Result<DomainRule, RuleError> {
        let refuse = |problem: String| RuleError {
            text: text.to_owned(),
            problem,
        };
        let trimmed = text.trim();
        let (host, port) = split_port(trimmed).map_err(refuse)?;
        if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            let ip = v6
                .parse::<IpAddr>()
                .map_err(|_| refuse(format!("{v6:?} is not an IPv6 address")))?;
            return Ok(DomainRule {
                host: HostPattern::Address(ip),
                port,
            });
        }
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(DomainRule {
                host: HostPattern::Address(ip),
                port,
            });
        }
        let pattern = match host.strip_prefix("*.") {
            Some(suffix) => {
                let suffix = normalise_name(suffix).map_err(refuse)?;
                if !suffix.contains('.') {
                    return Err(refuse(format!(
                        "*.{suffix} would cover a whole top-level domain; name the domains under it"
                    )));
                }
                HostPattern::Below(suffix)
            }
            None if host.contains('*') => {
                return Err(refuse(
                    "a wildcard is only `*.` at the start (`*.example.com`)".into(),
                ));
            }
            None => HostPattern::Exact(normalise_name(host).map_err(refuse)?),
        };
        Ok(DomainRule {
            host: pattern,
            port,
        })
    }

    fn matches(&self, target: &Target, port: u16) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        match (&self.host, target) {
            (HostPattern::Exact(name), Target::Name(t)) => name == t,
            (HostPattern::Below(suffix), Target::Name(t)) => t
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            (HostPattern::Address(ip), Target::Address(t)) => same_address(ip, t),
            _ => false,
        }
    }

    /// The narrowest rule that names `host` (a name, or an address) on `port`: what
    /// "allow always" stores for one connection.
    pub fn exactly(host: &str, port: u16) -> Result<DomainRule, RuleError> {
        let host = match host.parse::<IpAddr>() {
            Ok(IpAddr::V6(v6)) => format!("[{v6}]"),
            _ => host.to_owned(),
        };
        let rule = DomainRule::parse(&format!("{host}:{port}"))?;
        if matches!(rule.host, HostPattern::Below(_)) {
            return Err(RuleError {
                text: host,
                problem: "a wildcard names more than one host".into(),
            });
        }
        Ok(rule)
    }

    /// Whether this rule names exactly `ip` (what lets a special address be reached).
    pub fn names_address(&self, ip: &IpAddr) -> bool {
        matches!(&self.host, HostPattern::Address(a) if same_address(a, ip))
    }
}

/// Two addresses are the same when equal, an IPv4-mapped IPv6 address counting as its
/// IPv4 address.
fn same_address(a: &IpAddr, b: &IpAddr) -> bool {
    a.to_canonical() == b.to_canonical()
}

impl fmt::Display for DomainRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            HostPattern::Exact(n) => write!(f, "{n}")?,
            HostPattern::Below(s) => write!(f, "*.{s}")?,
            HostPattern::Address(IpAddr::V6(ip)) if self.port.is_some() => write!(f, "[{ip}]")?,
            HostPattern::Address(ip) => write!(f, "{ip}")?,
        }
        match self.port {
            Some(p) => write!(f, ":{p}"),
            None => Ok(()),
        }
    }
}

/// `host[:port]` (an IPv6 address with a port in brackets).
fn split_port(text: &str) -> Result<(&str, Option<u16>), String> {
    let port_of = |p: &str| {
        p.parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("port {p:?} is not 1-65535"))
    };
    if text.starts_with('[') {
        return match text.rsplit_once("]:") {
            Some((host, port)) => Ok((&text[..host.len() + 1], Some(port_of(port)?))),
            None => Ok((text, None)),
        };
    }
    match text.rsplit_once(':') {
        // More than one colon and no brackets: an IPv6 address without a port.
        Some((host, _)) if host.contains(':') => Ok((text, None)),
        Some((host, port)) => Ok((host, Some(port_of(port)?))),
        None => Ok((text, None)),
    }
}

/// `name` as DNS compares it, or why it is not a plain hostname.
fn normalise_name(name: &str) -> Result<String, String> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() || name.len() > 253 {
        return Err("a host name is 1 to 253 characters".into());
    }
    if !name.is_ascii() {
        return Err(format!(
            "{name:?} is not ASCII: write an internationalised name in punycode (xn--…)"
        ));
    }
    let lower = name.to_ascii_lowercase();
    for label in lower.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(format!(
                "{name:?} has an empty label or one over 63 characters"
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(format!(
                "{name:?}: a label neither starts nor ends with '-'"
            ));
        }
        if let Some(c) = label
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '-'))
        {
            return Err(format!("{name:?} has {c:?}, which no host name has"));
        }
    }
    Ok(lower)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(allow: &[&str], deny: &[&str]) -> EgressRules {
        let parse = |l: &[&str]| l.iter().map(|r| DomainRule::parse(r).unwrap()).collect();
        EgressRules {
            allow: parse(allow),
            deny: parse(deny),
        }
    }

    fn allowed(r: &EgressRules, host: &str, port: u16) -> bool {
        matches!(r.verdict(host, port), Verdict::Allowed(_))
    }

    #[test]
    fn a_wildcard_covers_names_below_its_suffix_and_never_the_suffix_itself() {
        let r = rules(&["*.pythonhosted.org"], &[]);
        assert!(allowed(&r, "files.pythonhosted.org", 443));
        assert!(allowed(&r, "a.b.pythonhosted.org", 443));
        assert!(
            allowed(&r, "FILES.PythonHosted.ORG.", 443),
            "case and a root dot"
        );
        assert!(!allowed(&r, "pythonhosted.org", 443), "the apex");
        assert!(!allowed(&r, "evilpythonhosted.org", 443), "a longer label");
        assert!(!allowed(&r, "pythonhosted.org.evil.com", 443));
        assert!(!allowed(&r, ".pythonhosted.org", 443), "an empty label");
    }

    #[test]
    fn ports_narrow_a_rule_and_deny_wins() {
        let r = rules(&["github.com:443", "*.github.com"], &["gist.github.com"]);
        assert!(allowed(&r, "github.com", 443));
        assert!(!allowed(&r, "github.com", 22));
        assert!(allowed(&r, "api.github.com", 8443));
        assert!(matches!(
            r.verdict("gist.github.com", 443),
            Verdict::Denied(rule) if rule.to_string() == "gist.github.com"
        ));
        assert_eq!(r.verdict("example.com", 443), Verdict::Unknown);
    }

    #[test]
    fn addresses_match_only_address_rules_and_mapped_ipv4_is_ipv4() {
        let r = rules(&["10.0.0.5", "[fd00::1]:8080", "*.internal.example"], &[]);
        assert!(allowed(&r, "10.0.0.5", 80));
        assert!(allowed(&r, "[::ffff:10.0.0.5]", 80));
        assert!(allowed(&r, "[fd00::1]", 8080));
        assert!(!allowed(&r, "[fd00::1]", 80));
        assert!(!allowed(&r, "10.0.0.6", 80));
        assert!(
            DomainRule::parse("10.0.0.5")
                .unwrap()
                .names_address(&"::ffff:10.0.0.5".parse().unwrap())
        );
    }

    #[test]
    fn rules_that_would_mean_more_than_they_say_are_refused() {
        for (text, says) in [
            ("*.com", "top-level"),
            ("*", "wildcard"),
            ("", "1 to 253"),
            ("exa*mple.com", "wildcard"),
            ("*.*.example.com", "'*'"),
            ("bücher.example", "punycode"),
            ("a..example.com", "empty label"),
            ("-a.example.com", "'-'"),
            ("example.com:0", "port"),
            ("example.com:99999", "port"),
            ("exa_mple.com", "'_'"),
            ("[fd00::1", "'['"),
        ] {
            let err = DomainRule::parse(text).unwrap_err().to_string();
            assert!(err.contains(says), "{text}: {err}");
        }
    }

    #[test]
    fn a_host_that_is_not_a_plain_name_is_never_allowed() {
        let r = rules(&["*.example.com"], &[]);
        for host in [
            "a.example.com\0.evil",
            "a b.example.com",
            "",
            "a.example.com:80",
            "*.example.com",
            "a..example.com",
        ] {
            assert!(
                matches!(r.verdict(host, 443), Verdict::NotAHost(_)),
                "{host:?}"
            );
        }
        let long = format!("{}.example.com", "a".repeat(64));
        assert!(matches!(r.verdict(&long, 443), Verdict::NotAHost(_)));
    }

    #[test]
    fn rules_print_as_they_parse() {
        for text in [
            "example.com",
            "*.example.com:443",
            "10.0.0.5",
            "[fd00::1]:8080",
            "fd00::2",
        ] {
            assert_eq!(DomainRule::parse(text).unwrap().to_string(), text);
        }
    }
}
