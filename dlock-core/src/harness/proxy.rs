//! A TCP proxy between a client and a server, for cutting connections on command (`tc netem`
//! and iptables are not available to the tests).

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::Result;

/// What the proxy does with connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyMode {
    /// Forwards both ways.
    Pass,
    /// Closes every open connection, and every new one at once. Connections opened after
    /// switching back to another mode are served again.
    Cut,
    /// Forwards the client's bytes to the server and drops the server's answers, as if every
    /// reply were lost on the way back.
    DropReplies,
    /// Forwards on the connections already open; a new connection is accepted but carries
    /// nothing until the proxy is switched to another mode, as if its path were slow.
    HoldNew,
}

/// A loopback TCP proxy to one server, stopped (and every connection closed) when dropped.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(server: &dlock_core::harness::ZkServer) -> dlock_core::harness::Result<()> {
/// use dlock_core::harness::{ProxyMode, TcpProxy};
/// let proxy = TcpProxy::start(server.connect_string().parse().unwrap()).await?;
/// let url = format!("zk://{}", proxy.address()); // clients connect here
/// proxy.set(ProxyMode::Cut); // ... and are cut off
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct TcpProxy {
    address: SocketAddr,
    mode: Arc<watch::Sender<State>>,
    accepting: JoinHandle<()>,
}

/// The mode, and how many cuts there were: a connection opened before a cut is closed even if
/// the proxy was switched back before the connection's task looked.
#[derive(Debug, Clone, Copy)]
struct State {
    mode: ProxyMode,
    cuts: u64,
}

impl TcpProxy {
    /// Listens on a free loopback port and forwards to `server`.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Io`](super::HarnessError::Io) if no port can be bound.
    pub async fn start(server: SocketAddr) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let mode = Arc::new(watch::Sender::new(State {
            mode: ProxyMode::Pass,
            cuts: 0,
        }));
        let accepting = tokio::spawn(accept(listener, server, Arc::clone(&mode)));
        Ok(Self {
            address,
            mode,
            accepting,
        })
    }

    /// Where clients connect.
    #[must_use]
    pub const fn address(&self) -> SocketAddr {
        self.address
    }

    /// Switches what the proxy does, for open connections and new ones.
    pub fn set(&self, mode: ProxyMode) {
        self.mode.send_modify(|state| {
            state.mode = mode;
            if mode == ProxyMode::Cut {
                state.cuts += 1;
            }
        });
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.set(ProxyMode::Cut);
        self.accepting.abort();
    }
}

async fn accept(listener: TcpListener, server: SocketAddr, mode: Arc<watch::Sender<State>>) {
    while let Ok((client, _)) = listener.accept().await {
        if mode.borrow().mode == ProxyMode::Cut {
            continue; // dropped: closed at once
        }
        tokio::spawn(forward(client, server, mode.subscribe()));
    }
}

/// Forwards one connection until either side closes it or the proxy cuts it.
async fn forward(client: TcpStream, server: SocketAddr, mut mode: watch::Receiver<State>) {
    let opened_after = mode.borrow_and_update().cuts;
    if mode.borrow().mode == ProxyMode::HoldNew
        && mode
            .wait_for(|state| state.mode != ProxyMode::HoldNew)
            .await
            .is_err()
    {
        return;
    }
    let Ok(upstream) = TcpStream::connect(server).await else {
        return;
    };
    let (mut client_in, mut client_out) = client.into_split();
    let (mut server_in, mut server_out) = upstream.into_split();
    let (mut asked, mut answered) = (vec![0_u8; 16 * 1024], vec![0_u8; 16 * 1024]);
    loop {
        tokio::select! {
            read = client_in.read(&mut asked) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => if server_out.write_all(&asked[..n]).await.is_err() { return },
            },
            read = server_in.read(&mut answered) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    let drop_it = mode.borrow().mode == ProxyMode::DropReplies;
                    if !drop_it && client_out.write_all(&answered[..n]).await.is_err() {
                        return;
                    }
                }
            },
            changed = mode.changed() => {
                if changed.is_err() || mode.borrow().cuts != opened_after {
                    return;
                }
            }
        }
    }
}
