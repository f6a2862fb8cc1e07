//! Asking the run's approver about a connection its egress rules do not name
//! (`sandbox.network = "proxy"`, `[sandbox.egress]`): the sandbox's proxy holds the
//! connection and calls the run's asker, made here from the request — its agent, session,
//! command and ask settings. A host the agent's `egressAllow` (in `exec-approvals.json`)
//! names is reached without asking. Otherwise the human sees the run, the command, and
//! the host and port (and, for a special address, what it is); "allow once" reaches it
//! for the rest of this run, "allow always" also stores exactly that host and port in the
//! agent's `egressAllow`, "deny" refuses it, and when nobody answers askFallback decides
//! (`full` reaches it, anything else refuses). Each host and port is asked about once per
//! run, one question at a time, at most [`MAX_QUESTIONS`] per run; every answer is on the
//! record.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use approvals::ApprovalsFile;
use approvals::ipc::protocol::{Answer, Prompt, PromptKind};
use audit::{Entry, Kind};
use caps::{AskConnection, ConnectionAnswer, ConnectionAsker, ConnectionQuestion};
use policy::{Ask, AskFallback};
use tokio_util::sync::CancellationToken;

use crate::ask::Asked;
use crate::decide::Decided;
use crate::runner::Runner;

/// The most questions one run may put to the human: past them, every host no rule
/// names is refused without asking (a command cannot queue prompts without end).
pub const MAX_QUESTIONS: usize = 16;

/// One run's asker.
struct RunAsker {
    runner: Runner,
    run_id: String,
    agent: String,
    session: String,
    host: String,
    command: String,
    ask: Ask,
    ask_fallback: AskFallback,
    host_file: Option<Arc<ApprovalsFile>>,
    cancel: CancellationToken,
    /// Told `Some(host:port)` when a question goes out and `None` when it is settled
    /// (the run's driver passes it on to its event sink).
    questions: tokio::sync::mpsc::UnboundedSender<Option<String>>,
    /// Held while a question is out: one at a time, so a second connection to the same
    /// host waits for the first's answer instead of asking again.
    asking: tokio::sync::Mutex<()>,
    /// What was decided so far.
    settled: Mutex<Settled>,
}

/// A run's answers so far.
#[derive(Default)]
struct Settled {
    /// Per host and port.
    answers: HashMap<(String, u16), ConnectionAnswer>,
    /// Questions put to the human (or its fallback).
    asked: usize,
}

impl Runner {
    /// The asker of the run `decided` (on `host`, the plan's host), ending its questions
    /// when `cancel` fires and telling `questions` when one goes out and is settled.
    pub(crate) fn connection_asker(
        &self,
        decided: &Decided,
        host: &str,
        cancel: &CancellationToken,
        questions: tokio::sync::mpsc::UnboundedSender<Option<String>>,
    ) -> ConnectionAsker {
        let policy = &decided.explanation.policy;
        ConnectionAsker(Arc::new(RunAsker {
            runner: Runner {
                host: Arc::clone(&self.host),
            },
            run_id: decided.run_id.clone(),
            agent: decided.request.agent.clone(),
            session: decided.request.session.clone(),
            host: host.to_owned(),
            command: decided.request.command.display(),
            ask: policy.ask.value,
            ask_fallback: policy.ask_fallback.value,
            host_file: decided.view.file.clone(),
            cancel: cancel.clone(),
            questions,
            asking: tokio::sync::Mutex::new(()),
            settled: Mutex::default(),
        }))
    }
}

impl AskConnection for RunAsker {
    fn ask<'a>(
        &'a self,
        question: &'a ConnectionQuestion,
    ) -> Pin<Box<dyn Future<Output = ConnectionAnswer> + Send + 'a>> {
        Box::pin(async move {
            let _one_at_a_time = self.asking.lock().await;
            if let Some(allowed) = self.stored(question) {
                return allowed;
            }
            // The host as a rule reads it (`Files.Example.` is `files.example`).
            let key = match policy::egress::DomainRule::exactly(&question.host, question.port) {
                Ok(rule) => (rule.to_string(), question.port),
                Err(_) => (question.host.clone(), question.port),
            };
            {
                let mut settled = self.settled.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(answer) = settled.answers.get(&key) {
                    return answer.clone();
                }
                if self.ask == Ask::Off {
                    return ConnectionAnswer::Refuse(format!(
                        "{}; ask = off, so nobody is asked",
                        question.why
                    ));
                }
                if settled.asked >= MAX_QUESTIONS {
                    return ConnectionAnswer::Refuse(format!(
                        "{}; this run has already asked about {MAX_QUESTIONS} hosts, the most one run may",
                        question.why
                    ));
                }
                settled.asked += 1;
            }
            let (answer, by, stored) = self.put(question).await;
            self.record(question, &answer, by, stored.as_deref());
            if !self.cancel.is_cancelled() {
                let mut settled = self.settled.lock().unwrap_or_else(|p| p.into_inner());
                settled.answers.insert(key, answer.clone());
            }
            answer
        })
    }
}

impl RunAsker {
    /// Allowed by a rule of the agent's `egressAllow`, as the request read the host file.
    fn stored(&self, question: &ConnectionQuestion) -> Option<ConnectionAnswer> {
        let rules = policy::egress::EgressRules {
            allow: self.host_file.as_ref()?.egress_allow_for(&self.agent),
            deny: Vec::new(),
        };
        match rules.verdict(&question.host, question.port) {
            policy::egress::Verdict::Allowed(rule) => Some(ConnectionAnswer::Allow {
                reason: format!(
                    "exec-approvals.json egressAllow {rule} (agent {})",
                    self.agent
                ),
                // Only an address rule matches an address: it names it.
                names_address: matches!(rule.host, policy::egress::HostPattern::Address(_)),
            }),
            _ => None,
        }
    }

    /// Ask the human; the answer, who gave it, and what "allow always" stored.
    async fn put(
        &self,
        question: &ConnectionQuestion,
    ) -> (ConnectionAnswer, &'static str, Option<String>) {
        let store = policy::egress::DomainRule::exactly(&question.host, question.port).ok();
        let prompt = Prompt::new(
            &self.run_id,
            &self.agent,
            &self.session,
            &self.host,
            PromptKind::Connection {
                command: self.command.clone(),
                destination: question.host.clone(),
                port: question.port,
                why: question.why.clone(),
                special: question.special.clone(),
                store: store.as_ref().map(ToString::to_string),
            },
        );
        // The driver may be gone (the run ended): then nobody is told, and that is fine.
        let _ = self.questions.send(Some(question.destination()));
        let asked = self
            .runner
            .ask(prompt, self.host_file.as_deref(), &self.cancel)
            .await;
        let _ = self.questions.send(None);
        let approver = self.runner.host.approvals.who();
        let nobody = match (&asked, store) {
            (Asked::Answered(Answer::AllowAlways, _), Some(rule)) => {
                return match self.store(&rule).await {
                    Ok(()) => (
                        ConnectionAnswer::Allow {
                            reason: format!(
                                "allowed by {approver}, and stored for agent {}: egressAllow {rule}",
                                self.agent
                            ),
                            names_address: true,
                        },
                        approver,
                        Some(rule.to_string()),
                    ),
                    Err(e) => (
                        ConnectionAnswer::Allow {
                            reason: format!(
                                "allowed for this run by {approver} (storing {rule} failed: {e})"
                            ),
                            names_address: true,
                        },
                        approver,
                        None,
                    ),
                };
            }
            (Asked::Answered(Answer::AllowOnce | Answer::AllowAlways, _), _) => {
                return (
                    // The human was shown this exact host (and what a special address is).
                    ConnectionAnswer::Allow {
                        reason: format!("allowed for this run by {approver}"),
                        names_address: true,
                    },
                    approver,
                    None,
                );
            }
            (Asked::Answered(Answer::Deny, _), _) => {
                return (
                    ConnectionAnswer::Refuse(format!("{}; denied by {approver}", question.why)),
                    approver,
                    None,
                );
            }
            (Asked::Cancelled, _) => {
                return (
                    ConnectionAnswer::Refuse("the run ended while the human was asked".into()),
                    "nobody (the run ended)",
                    None,
                );
            }
            (Asked::TimedOut, _) => "the approver did not answer in time".to_owned(),
            (Asked::NoApprover(why) | Asked::MayHaveRun(why), _) => format!("no approver: {why}"),
        };
        let answer = match self.ask_fallback {
            // Nobody saw the host: a special address stays out of reach.
            AskFallback::Full => ConnectionAnswer::Allow {
                reason: format!("askFallback = full ({nobody})"),
                names_address: false,
            },
            other => ConnectionAnswer::Refuse(format!(
                "{}; {nobody}, and askFallback = {} refuses a host no rule names",
                question.why,
                other.as_str()
            )),
        };
        (answer, "nobody (askFallback)", None)
    }

    /// Store `rule` in the agent's `egressAllow`.
    async fn store(&self, rule: &policy::egress::DomainRule) -> Result<(), String> {
        let (store, agent, rule) = (
            self.runner.host.store.clone(),
            self.agent.clone(),
            rule.clone(),
        );
        match tokio::task::spawn_blocking(move || store.add_egress_allow(&agent, &rule)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Put the answer on the record, beside the run's other records.
    fn record(
        &self,
        question: &ConnectionQuestion,
        answer: &ConnectionAnswer,
        by: &'static str,
        stored: Option<&str>,
    ) {
        let (verdict, reason, words) = match answer {
            ConnectionAnswer::Allow { reason: words, .. } => ("allow", "connection-allowed", words),
            ConnectionAnswer::Refuse(words) => ("deny", "connection-refused", words),
        };
        let destination = question.destination();
        let entry = Entry::new(Kind::Answer)
            .agent(&self.agent)
            .session(&self.session)
            .run_id(&self.run_id)
            .host(&self.host)
            .command(&self.command)
            .decision(verdict)
            .reason(reason)
            .rule(format!("connection to {destination}: {words}"))
            .approver(by);
        let entry = match stored {
            Some(rule) => entry.stored(format!("egressAllow {rule} for agent {}", self.agent)),
            None => entry,
        };
        let audit = &self.runner.host.audit;
        if !audit.required() {
            audit.record_queued(entry);
        } else if let Err(e) = audit.record_unsynced(entry) {
            // The run's own record, synced when it ends, makes this one durable with it.
            tracing::error!("not on the record: {e}");
        }
    }
}
