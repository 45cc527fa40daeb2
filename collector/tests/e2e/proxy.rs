//! A TCP fault proxy between an operator and the API server: it passes bytes through
//! (TLS and all) until told to add latency, refuse connections or reset them, as a
//! congested or failing network path does.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does to connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    None,
    /// Every chunk from the operator reaches the API server this much later.
    Latency(Duration),
    /// Nothing listens: connections are refused; open ones are closed.
    Refuse,
    /// Connections are accepted, then reset (RST); open ones too.
    Reset,
}

pub struct FaultProxy {
    address: SocketAddr,
    fault: watch::Sender<Fault>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards to `upstream` (`host:port`).
    pub async fn start(upstream: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port for the proxy");
        let address = listener.local_addr().expect("the proxy's address");
        let (fault, watching) = watch::channel(Fault::None);
        let upstream: Arc<str> = upstream.into();
        let task = tokio::spawn(serve(listener, address, upstream, watching));
        Self {
            address,
            fault,
            task,
        }
    }

    /// `https://127.0.0.1:<port>`, for a kubeconfig.
    pub fn url(&self) -> String {
        format!("https://{}", self.address)
    }

    pub fn set(&self, fault: Fault) {
        self.fault.send_replace(fault);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(
    listener: TcpListener,
    address: SocketAddr,
    upstream: Arc<str>,
    mut fault: watch::Receiver<Fault>,
) {
    let mut listener = Some(listener);
    loop {
        let current = *fault.borrow_and_update();
        if current == Fault::Refuse {
            // Closing the listener is what makes the kernel refuse connections.
            listener = None;
            if fault.changed().await.is_err() {
                return;
            }
            continue;
        }
        let Some(open) = listener.as_ref() else {
            match TcpListener::bind(address).await {
                Ok(bound) => listener = Some(bound),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
            continue;
        };
        tokio::select! {
            accepted = open.accept() => {
                let Ok((client, _)) = accepted else { continue };
                tokio::spawn(connection(client, Arc::clone(&upstream), fault.clone()));
            }
            changed = fault.changed() => if changed.is_err() { return },
        }
    }
}

/// One operator connection, forwarded until either side closes or a fault ends it.
async fn connection(mut client: TcpStream, upstream: Arc<str>, mut fault: watch::Receiver<Fault>) {
    if *fault.borrow_and_update() == Fault::Reset {
        reset(client);
        return;
    }
    let Ok(mut server) = TcpStream::connect(&*upstream).await else {
        return;
    };
    let latency = fault.clone();
    {
        let (mut client_read, mut client_write) = client.split();
        let (mut server_read, mut server_write) = server.split();
        let to_server = async {
            let mut buffer = vec![0; 64 * 1024];
            loop {
                let read = client_read.read(&mut buffer).await.unwrap_or(0);
                if read == 0 {
                    return;
                }
                let current = *latency.borrow();
                if let Fault::Latency(delay) = current {
                    tokio::time::sleep(delay).await;
                }
                let Some(chunk) = buffer.get(..read) else {
                    return;
                };
                if server_write.write_all(chunk).await.is_err() {
                    return;
                }
            }
        };
        let to_client = tokio::io::copy(&mut server_read, &mut client_write);
        tokio::select! {
            () = to_server => {}
            _ = to_client => {}
            () = ended_by_fault(&mut fault) => {}
        }
    }
    let current = *fault.borrow();
    if current == Fault::Reset {
        reset(client);
    }
}

/// Returns once the fault is one that ends open connections.
async fn ended_by_fault(fault: &mut watch::Receiver<Fault>) {
    loop {
        if fault.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
        let current = *fault.borrow();
        if matches!(current, Fault::Refuse | Fault::Reset) {
            return;
        }
    }
}

/// Closes `stream` with a reset instead of a FIN: linger on, zero seconds.
fn reset(stream: TcpStream) {
    let socket = socket2::SockRef::from(&stream);
    let _ = socket.set_linger(Some(Duration::ZERO));
    drop(stream);
}
