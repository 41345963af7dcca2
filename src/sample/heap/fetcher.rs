//! Asking another process off the sampling path: a thread of its own does
//! the asking (an HTTP GET, a DevTools exchange), each within its timeout,
//! so a slow or silent endpoint delays an answer, never a sample of /proc.
//! The sampler asks at the start of a tick and takes the answer, waiting at
//! most a bound, when it writes the tick's rows; an answer that comes later
//! is taken at a later tick or dropped.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::thread;
use std::time::{Duration, Instant};

/// One answer: what was read, or why not; and when it was asked.
pub type Answer<T> = (Instant, Result<T, String>);

/// A thread that asks on request; a request carries what to ask (`R`).
#[derive(Debug)]
pub struct Fetcher<T, R = ()> {
    ask: Sender<(Instant, R)>,
    answers: Receiver<Answer<T>>,
    /// Asked and not answered yet.
    pending: bool,
}

impl<T: Send + 'static, R: Send + 'static> Fetcher<T, R> {
    /// Starts the thread: each request runs `fetch` once. The thread ends
    /// when the fetcher is dropped (after the fetch in flight, which its own
    /// timeout bounds).
    pub fn start(
        name: &str,
        mut fetch: impl FnMut(R) -> Result<T, String> + Send + 'static,
    ) -> Self {
        let (ask, requests) = mpsc::channel::<(Instant, R)>();
        let (answer, answers) = mpsc::channel();
        let spawned = thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                while let Ok((at, request)) = requests.recv() {
                    if answer.send((at, fetch(request))).is_err() {
                        break;
                    }
                }
            });
        if let Err(e) = spawned {
            // No thread: every request answers with why.
            let (ask, _) = mpsc::channel();
            let (tx, answers) = mpsc::channel();
            let _ = tx.send((Instant::now(), Err(format!("cannot start a thread: {e}"))));
            return Fetcher {
                ask,
                answers,
                pending: true,
            };
        }
        Fetcher {
            ask,
            answers,
            pending: false,
        }
    }

    /// Asks once, unless an answer is still awaited.
    pub fn ask(&mut self, request: R) {
        if !self.pending && self.ask.send((Instant::now(), request)).is_ok() {
            self.pending = true;
        }
    }

    /// The answer to the last request, waiting at most `wait`; `None` if it
    /// has not come (it stays pending).
    pub fn take(&mut self, wait: Duration) -> Option<Answer<T>> {
        if !self.pending {
            return None;
        }
        let got = if wait.is_zero() {
            self.answers.try_recv().map_err(|e| match e {
                TryRecvError::Empty => RecvTimeoutError::Timeout,
                TryRecvError::Disconnected => RecvTimeoutError::Disconnected,
            })
        } else {
            self.answers.recv_timeout(wait)
        };
        match got {
            Ok(answer) => {
                self.pending = false;
                Some(answer)
            }
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                self.pending = false;
                Some((Instant::now(), Err("its reader thread ended".into())))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_answer_is_taken_later_and_never_asked_twice() {
        let mut n = 0;
        let mut f = Fetcher::start("test", move |()| {
            n += 1;
            thread::sleep(Duration::from_millis(if n == 1 { 300 } else { 0 }));
            Ok(n)
        });
        f.ask(());
        assert!(f.take(Duration::from_millis(20)).is_none());
        f.ask(()); // still pending: not asked again
        let (_, first) = f.take(Duration::from_secs(5)).unwrap();
        assert_eq!(first, Ok(1));
        f.ask(());
        assert_eq!(f.take(Duration::from_secs(5)).unwrap().1, Ok(2));
        assert!(f.take(Duration::ZERO).is_none(), "nothing asked");
    }
}
