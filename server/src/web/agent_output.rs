//! The agent's output as a connection sees it: what the agent writes (newline-delimited
//! JSON-RPC, in batches) is cut into messages and handed on at once, with no pipe and no
//! task in between.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;

/// Where each complete message goes; an error ends the output (the receiver is full).
pub type Deliver = Box<dyn FnMut(String) -> io::Result<()> + Send>;

/// An `AsyncWrite` that delivers each line written to it as one message.
pub struct LineOutput {
    partial: Vec<u8>,
    deliver: Deliver,
}

impl LineOutput {
    pub fn new(deliver: Deliver) -> Self {
        Self {
            partial: Vec::new(),
            deliver,
        }
    }

    fn take_line(&mut self, line: &[u8]) -> io::Result<()> {
        let bytes = if self.partial.is_empty() {
            line.to_vec()
        } else {
            let mut joined = std::mem::take(&mut self.partial);
            joined.extend_from_slice(line);
            joined
        };
        let text =
            String::from_utf8(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        if text.trim().is_empty() {
            return Ok(());
        }
        (self.deliver)(text)
    }

    fn write_all_lines(&mut self, buf: &[u8]) -> io::Result<()> {
        let mut rest = buf;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            self.take_line(&rest[..end])?;
            rest = &rest[end + 1..];
        }
        self.partial.extend_from_slice(rest);
        Ok(())
    }
}

impl AsyncWrite for LineOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        Poll::Ready(this.write_all_lines(buf).map(|()| buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tokio::io::AsyncWriteExt;

    fn collecting() -> (LineOutput, Arc<Mutex<Vec<String>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let into = seen.clone();
        let output = LineOutput::new(Box::new(move |line| {
            into.lock()
                .map_err(|_| io::Error::other("poisoned"))?
                .push(line);
            Ok(())
        }));
        (output, seen)
    }

    #[tokio::test]
    async fn lines_split_across_writes_and_batched_in_one_arrive_whole_and_in_order() {
        let (mut output, seen) = collecting();
        output
            .write_all(b"{\"a\":1}\n{\"b\":")
            .await
            .expect("write");
        output
            .write_all(b"2}\n\n{\"c\":3}\n{\"d\"")
            .await
            .expect("write");
        let got = seen.lock().expect("lock").clone();
        assert_eq!(got, vec![r#"{"a":1}"#, r#"{"b":2}"#, r#"{"c":3}"#]);
    }

    #[tokio::test]
    async fn a_full_receiver_ends_the_output_with_an_error() {
        let mut output = LineOutput::new(Box::new(|_| Err(io::Error::other("full"))));
        let error = output.write_all(b"{}\n").await.expect_err("refused");
        assert_eq!(error.to_string(), "full");
    }
}
