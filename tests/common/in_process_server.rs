//! Shared by integration tests: `execcritic::serve` in this process, on a free loopback port, over
//! a given engine, served as `tiny` (64 sequences, a 4,096-token context, 1 MiB bodies, the
//! default connection bounds). Dropping it stops the server and waits for its thread.

use execcritic::engine::Engine;
use execcritic::serve::limits::TokenLimits;
use execcritic::serve::{AppState, ServeConfig};

pub struct InProcessServer {
    /// `http://127.0.0.1:PORT`
    pub base: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl InProcessServer {
    pub fn start(engine: Engine) -> Self {
        let config = ServeConfig {
            served_model_name: "tiny".into(),
            api_key: None,
            max_sequences: 64,
            limits: TokenLimits { max_model_len: 4096, max_tokens: 1024 },
            max_body_bytes: 1 << 20,
            connections: Default::default(),
        };
        let state = AppState::new(engine, config);
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                addr_tx.send(listener.local_addr().unwrap()).unwrap();
                execcritic::serve::serve(listener, state, async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
            });
        });
        let addr = addr_rx.recv().unwrap();
        InProcessServer { base: format!("http://{addr}"), stop: Some(stop), thread: Some(thread) }
    }
}

impl Drop for InProcessServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
