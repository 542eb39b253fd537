//! Unix `SOCK_SEQPACKET` socket pairs, and messages that carry one descriptor (`SCM_RIGHTS`):
//! how the daemon hands a run's report pipe to the fork server. All through rustix.
//!
//! A `SOCK_SEQPACKET` socket keeps message boundaries: one send is one receive, a message too
//! large for the receiver's buffer is cut (and reported as such here), and end-of-file is a
//! zero-length receive once the other end is closed.

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
};

/// How many descriptors one received message may carry before it counts as truncated.
const RECV_FDS: usize = 12;

/// A connected pair of Unix `SOCK_SEQPACKET` sockets, both close-on-exec.
///
/// Errors: the system is out of descriptors or memory.
pub fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?)
}

/// Makes every later receive on `socket` give up after `timeout` (with a `WouldBlock` error)
/// instead of waiting forever.
///
/// Errors: the system refused (e.g. `timeout` is zero or too large).
pub fn set_receive_timeout(socket: impl AsFd, timeout: Duration) -> io::Result<()> {
    rustix::net::sockopt::set_socket_timeout(
        socket,
        rustix::net::sockopt::Timeout::Recv,
        Some(timeout),
    )?;
    Ok(())
}

/// Sends `data` as one message, never raising SIGPIPE (a closed peer is an error). Retries on
/// EINTR. Returns the bytes sent (all of them, for a `SOCK_SEQPACKET` socket).
///
/// Errors: the peer is gone (EPIPE), the message is too large, or the system refused.
pub fn send(socket: impl AsFd, data: &[u8]) -> io::Result<usize> {
    loop {
        match rustix::net::send(&socket, data, SendFlags::NOSIGNAL) {
            Ok(n) => return Ok(n),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Receives one message into `buf`, waiting as long as it takes; returns its length (0 at
/// end-of-file). Retries on EINTR.
///
/// Errors: the system refused.
pub fn recv(socket: impl AsFd, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match rustix::net::recv(&socket, &mut *buf, RecvFlags::empty()) {
            Ok((n, _)) => return Ok(n),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Receives one message into `buf`; returns its length (0 at end-of-file). The socket's receive
/// timeout must be `timeout` ([`set_receive_timeout`]); the call gives up `timeout` after it
/// began however many signals interrupt it. The kernel would start the socket's timeout over
/// at every retry after EINTR, so a signal every few seconds (a reload) would keep the caller
/// waiting for ever; after an interruption this shortens the timeout to what is left, and sets
/// it back to `timeout` before returning.
///
/// Errors: no message within `timeout` (`WouldBlock`), or the system refused.
pub fn recv_within(socket: impl AsFd, buf: &mut [u8], timeout: Duration) -> io::Result<usize> {
    let deadline = std::time::Instant::now() + timeout;
    let mut shortened = false;
    let got = loop {
        match rustix::net::recv(&socket, &mut *buf, RecvFlags::empty()) {
            Ok((n, _)) => break Ok(n),
            Err(rustix::io::Errno::INTR) => {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                // Below a millisecond the kernel would round to "no timeout": time is up.
                if left < Duration::from_millis(1) {
                    break Err(io::Error::from(io::ErrorKind::WouldBlock));
                }
                if let Err(e) = set_receive_timeout(&socket, left) {
                    break Err(e);
                }
                shortened = true;
            }
            Err(e) => break Err(e.into()),
        }
    };
    if shortened {
        set_receive_timeout(&socket, timeout)?;
    }
    got
}

/// Sends `data` as one message with `fd` attached (`SCM_RIGHTS`: the receiver gets its own
/// descriptor for the same open file). Never raises SIGPIPE; retries on EINTR.
///
/// Errors: the peer is gone (EPIPE), a short send (`Other`), or the system refused.
pub fn send_with_fd(socket: impl AsFd, data: &[u8], fd: BorrowedFd<'_>) -> io::Result<()> {
    let fds = [fd];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(io::Error::other(
            "no room for the descriptor in the message",
        ));
    }
    let iov = [IoSlice::new(data)];
    loop {
        match rustix::net::sendmsg(&socket, &iov, &mut control, SendFlags::NOSIGNAL) {
            Ok(n) if n == data.len() => return Ok(()),
            Ok(_) => return Err(io::Error::other("short send on a SOCK_SEQPACKET socket")),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Receives one message into `buf` and the descriptor attached to it, if any (close-on-exec).
/// `Ok(None)` at end-of-file. Only the first descriptor is kept; any other is closed.
///
/// Errors: the message or its descriptors did not fit (`EMSGSIZE`; the descriptors received
/// are closed), or the system refused.
pub fn recv_with_fd(
    socket: impl AsFd,
    buf: &mut [u8],
) -> io::Result<Option<(usize, Option<OwnedFd>)>> {
    // Room for a few descriptors, so that a sender attaching more than one is answered by
    // closing the extra ones rather than by a truncated message.
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(RECV_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut iov = [IoSliceMut::new(buf)];
    let msg = rustix::net::recvmsg(&socket, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC)?;
    let mut fd = None;
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            for got in received {
                // Only the first is expected; any other is closed by its drop.
                if fd.is_none() {
                    fd = Some(got);
                }
            }
        }
    }
    if msg.bytes == 0 && fd.is_none() {
        return Ok(None);
    }
    if msg
        .flags
        .intersects(ReturnFlags::TRUNC | ReturnFlags::CTRUNC)
    {
        return Err(io::Error::from_raw_os_error(libc::EMSGSIZE));
    }
    Ok(Some((msg.bytes, fd)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, Write};
    use std::os::fd::AsRawFd;

    #[test]
    fn a_message_and_its_descriptor_cross_a_socket_pair() {
        let (a, b) = seqpacket_pair().unwrap();
        let file = tempfile::tempfile().unwrap();
        send_with_fd(&a, b"hello", file.as_fd()).unwrap();
        let mut buf = [0u8; 16];
        let (n, fd) = recv_with_fd(&b, &mut buf).unwrap().unwrap();
        assert_eq!(&buf[..n], b"hello");
        let fd = fd.expect("a descriptor");
        assert_ne!(fd.as_raw_fd(), file.as_raw_fd());
        assert!(crate::sys::files::is_close_on_exec(&fd).unwrap());
        // The same open file: a write through one is seen through the other.
        let mut got = std::fs::File::from(fd);
        (&file).write_all(b"xyz").unwrap();
        got.rewind().unwrap();
        let mut s = String::new();
        got.read_to_string(&mut s).unwrap();
        assert_eq!(s, "xyz");
        // A message too large for the buffer is an error, not a silent truncation.
        send_with_fd(&a, &[7u8; 64], file.as_fd()).unwrap();
        assert!(recv_with_fd(&b, &mut buf).is_err());
        // Plain messages keep their boundaries.
        assert_eq!(send(&a, b"12345678").unwrap(), 8);
        let mut reply = [0u8; 8];
        assert_eq!(
            recv_within(&b, &mut reply, Duration::from_secs(5)).unwrap(),
            8
        );
        assert_eq!(&reply, b"12345678");
        drop(a);
        assert!(recv_with_fd(&b, &mut buf).unwrap().is_none());
    }

    #[test]
    fn a_receive_timeout_is_a_would_block_error() {
        let (_a, b) = seqpacket_pair().unwrap();
        set_receive_timeout(&b, Duration::from_millis(10)).unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(
            recv_within(&b, &mut buf, Duration::from_millis(10))
                .unwrap_err()
                .kind(),
            io::ErrorKind::WouldBlock
        );
    }
}
