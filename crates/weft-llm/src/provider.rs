//! The one seam between weft and any LLM: [`ChatProvider`]. The OpenAI-compatible client, the
//! scripted provider and the replay provider implement it; everything above only sees this.

use std::future::Future;
use std::pin::Pin;

use crate::chat::{ChatRequest, ChatResponse};
use crate::error::Result;

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Something that answers chat-completion requests.
pub trait ChatProvider: Send + Sync {
    /// Short name for transcripts (`openai`, `scripted`, `replay`).
    fn name(&self) -> &str;
    /// The model it talks to, when it knows (part of the plan cache key: a different model
    /// plans afresh). Empty by default.
    fn model(&self) -> &str {
        ""
    }
    /// Sends one request and returns the answer.
    fn chat<'a>(&'a self, request: &'a ChatRequest) -> BoxFuture<'a, Result<ChatResponse>>;
}
