//! Loopback ports for what tests start: a port free a moment ago, for a server that
//! can be told no other; and ports held by a socket bound to them but not listening,
//! which no other process can take while the test runs: an address where connections
//! are refused, or one a server that binds with `SO_REUSEPORT` listens on.

use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};

use socket2::{Domain, Protocol, Socket, Type};

/// A loopback port that was free a moment ago, for a server another process binds. It
/// is picked below the kernel's ephemeral range (32768 and up), where the outgoing
/// connections of the tests running alongside cannot take it before the server does;
/// another process choosing ports the same way still can, so a server that is given
/// one is started with [`super::ServerProcess::start_on_chosen_ports`].
pub fn free_port() -> u16 {
    let random = RandomState::new();
    (0u64..)
        .map(|attempt| 10_000 + (random.hash_one(attempt) % 20_000) as u16)
        .find(|port| TcpListener::bind(("127.0.0.1", *port)).is_ok())
        .expect("a free loopback port between 10000 and 30000")
}

/// A loopback address where nothing listens, and the guard that keeps it so: a
/// connection to it is refused, and no other socket can bind it while the guard lives.
pub fn refusing_address() -> (HeldPort, String) {
    let held = HeldPort::refusing();
    let address = held.address();
    (held, address)
}

/// A loopback port held by a socket bound to it, never listening, for as long as this
/// lives. The kernel gives it a port no other socket has; a port bound explicitly is
/// never given to an outgoing connection either. Displays as its number.
pub struct HeldPort {
    _socket: Socket,
    port: u16,
}

impl HeldPort {
    /// A port no other socket can bind: connections to it are refused.
    pub fn refusing() -> Self {
        Self::bind(false)
    }

    /// A port only a socket of this user that sets `SO_REUSEPORT` can bind besides
    /// this one: kube-apiserver with `--permit-port-sharing`, for one. Connections go
    /// to the server listening on it, and are refused while none does; the port stays
    /// the server's across restarts.
    pub fn shareable() -> Self {
        Self::bind(true)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// A socket bound to a port the kernel chooses (which it never shares with another
    /// `SO_REUSEPORT` socket), without `SO_REUSEADDR`: with it, any other socket that
    /// sets it could bind and listen on the port while this one does not listen.
    fn bind(reuse_port: bool) -> Self {
        let socket =
            Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).expect("a TCP socket");
        socket
            .set_reuse_port(reuse_port)
            .expect("SO_REUSEPORT set on a TCP socket");
        let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        socket
            .bind(&loopback.into())
            .expect("a loopback port bound");
        let port = socket
            .local_addr()
            .ok()
            .and_then(|address| address.as_socket())
            .map(|address| address.port())
            .expect("the bound socket's port");
        Self {
            _socket: socket,
            port,
        }
    }
}

impl fmt::Display for HeldPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.port)
    }
}

impl fmt::Debug for HeldPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HeldPort({})", self.port)
    }
}

#[cfg(test)]
mod tests {
    use std::io::ErrorKind;
    use std::net::{TcpListener, TcpStream};

    use socket2::{Domain, Protocol, Socket, Type};

    use super::{HeldPort, refusing_address};

    /// As Go and Rust servers bind: `SO_REUSEADDR`, and `SO_REUSEPORT` when asked.
    fn listen(port: u16, reuse_port: bool) -> std::io::Result<Socket> {
        let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(reuse_port)?;
        socket.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], port)).into())?;
        socket.listen(16)?;
        Ok(socket)
    }

    #[test]
    fn a_refusing_address_refuses_and_cannot_be_taken() {
        let (_held, address) = refusing_address();
        let refused = TcpStream::connect(&address).expect_err("nothing listens");
        assert_eq!(refused.kind(), ErrorKind::ConnectionRefused);
        assert!(TcpListener::bind(&address).is_err(), "{address} was taken");
        let port = address.rsplit(':').next().and_then(|p| p.parse().ok());
        let port = port.expect("a port");
        assert!(listen(port, true).is_err(), "{address} was shared");
    }

    #[test]
    fn a_shareable_port_is_the_servers_that_reuses_it_and_no_one_elses() {
        let held = HeldPort::shareable();
        assert!(listen(held.port(), false).is_err(), "{held} was taken");
        let server = listen(held.port(), true).expect("the server binds the held port");
        TcpStream::connect(held.address()).expect("the server takes connections");
        drop(server);
        let refused = TcpStream::connect(held.address()).expect_err("no server");
        assert_eq!(refused.kind(), ErrorKind::ConnectionRefused);
        listen(held.port(), true).expect("the server binds it again after a restart");
    }

    #[test]
    fn shareable_ports_held_at_once_are_distinct() {
        let held: Vec<HeldPort> = (0..20).map(|_| HeldPort::shareable()).collect();
        let mut distinct: Vec<u16> = held.iter().map(HeldPort::port).collect();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), held.len(), "{held:?}");
    }
}
