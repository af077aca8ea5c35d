// The reference web client of `talaria serve`: connect with the token, list and open
// sessions, stream answers as Markdown, show tool cards with their permission questions
// and diffs, cancel, steer the running turn, load a past session. Plain modules, no
// framework: a frontend author can copy it.
import { AcpConnection } from "/acp.js";
import { renderMarkdown } from "/markdown.js";

const $ = (id) => document.getElementById(id);
const state = { connection: null, sessionId: null, running: false, last: null, cards: new Map() };

function el(tag, className, children = []) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  node.append(...children);
  return node;
}

function status(text) {
  $("status").textContent = text;
}

function scrollDown() {
  $("transcript").scrollTop = $("transcript").scrollHeight;
}

// The token comes in the address's fragment (never sent to the server) or is typed.
function tokenFromAddress() {
  const match = location.hash.match(/token=([^&]+)/);
  if (!match) return "";
  history.replaceState(null, "", location.pathname);
  return decodeURIComponent(match[1]);
}

async function connect() {
  const token = $("token").value.trim();
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const connection = new AcpConnection(`${scheme}//${location.host}/acp`, token);
  connection.onStatus = (text) => status(text);
  connection.onNotification("session/update", onUpdate);
  connection.onRequest("session/request_permission", askPermission);
  try {
    await connection.open();
    const init = await connection.request("initialize", {
      protocolVersion: 1,
      clientCapabilities: {},
      clientInfo: { name: "talaria-web", version: "1" },
    });
    state.connection = connection;
    status(`connected to ${init.agentInfo?.name ?? "the agent"}`);
    $("connect").hidden = true;
    $("workspace").hidden = false;
    await listSessions();
  } catch (error) {
    status(`cannot connect: ${error.message}`);
  }
}

async function listSessions() {
  const { sessions } = await state.connection.request("session/list", {});
  const items = sessions.map((session) => {
    const open = el("button", "", [session.title || session.sessionId]);
    open.dataset.session = session.sessionId;
    open.title = session.cwd;
    open.onclick = () => loadSession(session.sessionId, session.cwd);
    return el("li", "", [open]);
  });
  $("sessions").replaceChildren(...items);
}

function startTranscript(sessionId) {
  state.sessionId = sessionId;
  state.last = null;
  state.cards.clear();
  $("transcript").replaceChildren();
  $("transcript").dataset.session = sessionId;
}

async function newSession() {
  const cwd = $("cwd").value.trim();
  if (!cwd.startsWith("/")) {
    status("the folder must be an absolute path");
    return;
  }
  const { sessionId } = await state.connection.request("session/new", { cwd, mcpServers: [] });
  startTranscript(sessionId);
  status(`session ${sessionId}`);
  await listSessions();
}

async function loadSession(sessionId, cwd) {
  startTranscript(sessionId);
  await state.connection.request("session/load", { sessionId, cwd, mcpServers: [] });
  status(`loaded ${sessionId}`);
}

// One message of the transcript, continued while chunks of its kind keep coming.
function append(kind, text) {
  if (state.last?.kind !== kind) {
    const node = el("div", `message ${kind}`);
    node.dataset.kind = kind;
    $("transcript").append(node);
    state.last = { kind, node, text: "" };
  }
  state.last.text += text;
  if (kind === "agent") renderMarkdown(state.last.node, state.last.text);
  else state.last.node.textContent = state.last.text;
  scrollDown();
}

function onUpdate({ sessionId, update }) {
  if (sessionId !== state.sessionId) return;
  const text = update.content?.type === "text" ? update.content.text : "";
  switch (update.sessionUpdate) {
    case "user_message_chunk":
      return append("user", text);
    case "agent_message_chunk":
      return append("agent", text);
    case "agent_thought_chunk":
      return append("thought", text);
    case "tool_call":
    case "tool_call_update":
      return showCard(update);
    case "notice":
      state.last = null;
      return append("notice", update.message ?? "");
    default:
      return undefined;
  }
}

function showCard(update) {
  let card = state.cards.get(update.toolCallId);
  if (!card) {
    const title = el("div", "title", [el("span", "name"), el("span", "state")]);
    const node = el("div", "tool", [title, el("div", "body")]);
    node.dataset.toolCall = update.toolCallId;
    $("transcript").append(node);
    card = { node, title: "", status: "pending" };
    state.cards.set(update.toolCallId, card);
    state.last = null;
  }
  if (update.title) card.title = update.title;
  if (update.status) card.status = update.status;
  card.node.querySelector(".name").textContent = card.title;
  card.node.querySelector(".state").textContent = card.status;
  card.node.dataset.status = card.status;
  if (update.content) card.node.querySelector(".body").replaceChildren(...update.content.map(contentNode));
  scrollDown();
  return card;
}

function contentNode(item) {
  if (item.type === "diff") return diffNode(item);
  if (item.type === "content" && item.content?.type === "text") return el("pre", "", [item.content.text]);
  if (item.type === "terminal") return el("pre", "", [`(terminal ${item.terminalId})`]);
  return el("pre", "", [JSON.stringify(item)]);
}

// A diff as removed and added lines, by the longest common run of lines.
function diffNode({ path, oldText, newText }) {
  const before = (oldText ?? "").split("\n");
  const after = (newText ?? "").split("\n");
  const keep = commonLines(before, after);
  const lines = [];
  let [i, j] = [0, 0];
  for (const [k, l] of keep) {
    while (i < k) lines.push(el("span", "removed", [`-${before[i++]}`]));
    while (j < l) lines.push(el("span", "added", [`+${after[j++]}`]));
    lines.push(el("span", "", [` ${before[i]}`]), "\n");
    i++;
    j++;
  }
  while (i < before.length && oldText) lines.push(el("span", "removed", [`-${before[i++]}`]));
  while (j < after.length) lines.push(el("span", "added", [`+${after[j++]}`]));
  const pre = el("pre", "diff", lines);
  pre.dataset.path = path;
  return el("div", "", [el("div", "path", [path]), pre]);
}

function commonLines(a, b) {
  if (a.length * b.length > 250000) return [];
  const table = Array.from({ length: a.length + 1 }, () => new Array(b.length + 1).fill(0));
  for (let i = a.length - 1; i >= 0; i--) {
    for (let j = b.length - 1; j >= 0; j--) {
      table[i][j] = a[i] === b[j] ? table[i + 1][j + 1] + 1 : Math.max(table[i + 1][j], table[i][j + 1]);
    }
  }
  const pairs = [];
  let [i, j] = [0, 0];
  while (i < a.length && j < b.length) {
    if (a[i] === b[j]) pairs.push([i++, j++]);
    else if (table[i + 1][j] >= table[i][j + 1]) i++;
    else j++;
  }
  return pairs;
}

// A permission question, shown on the call's card with the agent's options.
function askPermission({ toolCall, options }) {
  const card = showCard({ toolCallId: toolCall.toolCallId, ...toolCall });
  return new Promise((resolve) => {
    const buttons = options.map((option) => {
      const button = el("button", "", [option.name]);
      button.dataset.option = option.kind;
      button.onclick = () => {
        question.remove();
        resolve({ outcome: { outcome: "selected", optionId: option.optionId } });
      };
      return button;
    });
    const question = el("div", "question", ["Allow this call? ", ...buttons]);
    card.node.append(question);
    scrollDown();
  });
}

async function send(event) {
  event.preventDefault();
  const text = $("prompt").value.trim();
  if (!text || !state.sessionId) return;
  $("prompt").value = "";
  const prompt = [{ type: "text", text }];
  if (state.running) {
    // A message typed while a turn runs steers it (it enters where the turn is).
    await state.connection.request("_session/steering", { sessionId: state.sessionId, prompt });
    return;
  }
  state.last = null;
  append("user", text);
  state.last = null;
  setRunning(true);
  try {
    const { stopReason } = await state.connection.request("session/prompt", { sessionId: state.sessionId, prompt });
    status(`turn ended: ${stopReason}`);
  } catch (error) {
    status(`the prompt failed: ${error.message}`);
  } finally {
    setRunning(false);
  }
}

function setRunning(running) {
  state.running = running;
  $("cancel").disabled = !running;
  $("send").textContent = running ? "Steer" : "Send";
  $("transcript").dataset.running = String(running);
}

$("token").value = tokenFromAddress();
$("connect-button").onclick = connect;
$("new-session").onclick = () => newSession().catch((error) => status(error.message));
$("prompt-form").onsubmit = send;
$("cancel").onclick = () => state.connection.notify("session/cancel", { sessionId: state.sessionId });
// Tests drop the socket as a network failure would (the connection is kept).
window.addEventListener("talaria-test-interrupt", () => state.connection?.interrupt());
if ($("token").value) connect();
