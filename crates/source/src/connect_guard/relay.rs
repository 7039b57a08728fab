//! One connection from libgit2: connect to the checked address of the origin and relay
//! the bytes both ways, counting what the origin sends.

use std::io;
use std::net::{Shutdown, TcpStream};

use super::Shared;

/// One connection from libgit2: connect, then relay until either side closes, the
/// remote passes a cap or the fetch's time is up; then both connections are closed.
pub(super) fn serve(client: TcpStream, shared: &Shared) -> io::Result<()> {
    let upstream = match shared.connect() {
        Ok(upstream) => upstream,
        Err(refusal) => {
            shared.record(refusal);
            return Ok(());
        }
    };
    client.set_read_timeout(Some(shared.remaining()))?;
    let (mut client_in, mut upstream_out) = (client.try_clone()?, upstream.try_clone()?);
    let upward = std::thread::Builder::new()
        .name("connect-guard-relay".to_owned())
        .spawn(move || {
            let _ = io::copy(&mut client_in, &mut upstream_out);
            let _ = upstream_out.shutdown(Shutdown::Write);
        })?;
    let (mut upstream_in, mut client_out) = (upstream, client);
    let _ = shared.copy_down(&mut upstream_in, &mut client_out);
    let _ = client_out.shutdown(Shutdown::Both);
    let _ = upstream_in.shutdown(Shutdown::Both);
    let _ = upward.join();
    Ok(())
}
