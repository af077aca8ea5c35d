// A slow network between a browser page and `talaria serve`, for the test of a page that falls
// behind: a TCP proxy that passes everything on until told to stop reading from the server
// (the server's output to the page then piles up, as for a reader that stalled), and that
// leaves out the WebSocket messages carrying the test's filler mark (what filled the pipe,
// which a browser would take minutes to render). Requests name the server's own address (it
// refuses another Host or Origin) and ask for no compression, so messages can be read.
import net from "node:net";

/** A proxy to `serverUrl` (`http://127.0.0.1:PORT/acp`); `filler`: the mark of messages left out. */
export async function slowLink(serverUrl, filler) {
  const target = new URL(serverUrl);
  const links = new Set();
  const state = { reading: true, address: "" };
  const proxy = net.createServer((down) => {
    const link = connect(target, down, state, filler);
    links.add(link);
    down.once("close", () => links.delete(link));
  });
  await new Promise((ok) => proxy.listen(0, "127.0.0.1", ok));
  state.address = `127.0.0.1:${proxy.address().port}`;
  return {
    /** The page's address of the server, through the proxy. */
    origin: `http://${state.address}`,
    /** Stops reading what the server sends (what the page sends still goes). */
    stall() {
      state.reading = false;
      for (const link of links) link.up.pause();
    },
    /** Reads again. */
    resume() {
      state.reading = true;
      for (const link of links) link.up.resume();
    },
    close() {
      for (const link of links) link.destroy();
      proxy.close();
    },
  };
}

/** One connection of the page, through to the server. */
function connect(target, down, state, filler) {
  const up = net.connect(Number(target.port), target.hostname);
  if (!state.reading) up.pause();
  let upgraded = false;
  const frames = new Frames(filler, (data) => down.write(data));
  down.on("data", (data) => up.write(upgraded ? data : request(data, state.address, target.host)));
  up.on("data", (data) => {
    if (upgraded) return frames.push(data);
    const text = data.toString("latin1");
    const end = text.indexOf("\r\n\r\n");
    if (!text.startsWith("HTTP/1.1 101") || end < 0) return down.write(data);
    upgraded = true;
    down.write(data.subarray(0, end + 4));
    return frames.push(data.subarray(end + 4));
  });
  const destroy = () => {
    up.destroy();
    down.destroy();
  };
  for (const socket of [up, down]) {
    socket.on("error", destroy);
    socket.on("end", destroy);
  }
  return { up, destroy };
}

/** An HTTP request as the server expects it: its own address, no compression offered. */
function request(data, proxied, server) {
  const text = data.toString("latin1").replaceAll(proxied, server);
  return Buffer.from(text.replace(/\r\nSec-WebSocket-Extensions:[^\r]*/i, ""), "latin1");
}

/** The server's WebSocket frames (never masked), passed on whole unless filler. */
class Frames {
  constructor(filler, write) {
    this.filler = filler;
    this.write = write;
    this.pending = Buffer.alloc(0);
  }

  push(data) {
    this.pending = Buffer.concat([this.pending, data]);
    for (let size = frameSize(this.pending); size > 0; size = frameSize(this.pending)) {
      const frame = this.pending.subarray(0, size);
      this.pending = this.pending.subarray(size);
      if (!frame.toString("latin1").includes(this.filler)) this.write(frame);
    }
  }
}

/** The size of the frame at the start of `data`, or 0 when it has not all come. */
function frameSize(data) {
  if (data.length < 2) return 0;
  const short = data[1] & 0x7f;
  const [header, length] =
    short === 126
      ? [4, data.length >= 4 ? data.readUInt16BE(2) : -1]
      : short === 127
        ? [10, data.length >= 10 ? Number(data.readBigUInt64BE(2)) : -1]
        : [2, short];
  return length >= 0 && data.length >= header + length ? header + length : 0;
}
