import Foundation
import JSONRPC

/// A conversation with a server in the `-->` / `<--` line format (as go-ethereum's rpc/testdata):
///
///     // a comment
///     #! maxLineBytes 64            a setting for the server the script runs against
///     --> {"jsonrpc":"2.0","method":"rpc.ping","id":1}
///     <-- {"jsonrpc":"2.0","id":1,"result":"pong"}
///     -->hex ff fe 0a              raw bytes, exactly as written (no newline added)
///     <-- (no reply)               nothing is answered: checked by a ping sent right after,
///                                  whose pong must be the very next line
///     <-- (closed)                 the server closes the connection next
///     <~~ {...}                    consecutive <~~ lines: these replies, in any order
///
/// Sent lines may use `"${NAME}"` captured from earlier replies; expected lines may use matchers
/// (see `JSONMatcher`). Replies are compared as JSON values, not as text.
public struct WireScript: Sendable {
    public enum Step: Sendable {
        case send(String, line: Int)
        case sendBytes([UInt8], line: Int)
        case expect(String, line: Int)
        case expectNoReply(line: Int)
        case expectClosed(line: Int)
        case expectUnordered([String], line: Int)
    }

    public let name: String
    public let settings: [String: String]
    public let steps: [Step]

    public init(name: String, text: String) throws {
        self.name = name
        var settings: [String: String] = [:]
        var steps: [Step] = []
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = String(raw)
            let n = index + 1
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.isEmpty || trimmed.hasPrefix("//") { continue }
            if trimmed.hasPrefix("#!") {
                let parts = trimmed.dropFirst(2).split(separator: " ", maxSplits: 1).map(String.init)
                guard parts.count == 2 else { throw ScriptError(file: name, line: n, message: "setting needs a name and a value") }
                settings[parts[0]] = parts[1]
            } else if trimmed.hasPrefix("-->hex ") {
                let hex = trimmed.dropFirst("-->hex ".count).split(separator: " ")
                let bytes = try hex.map { h -> UInt8 in
                    guard let b = UInt8(h, radix: 16) else { throw ScriptError(file: name, line: n, message: "bad hex byte \(h)") }
                    return b
                }
                steps.append(.sendBytes(bytes, line: n))
            } else if trimmed.hasPrefix("--> ") {
                steps.append(.send(String(trimmed.dropFirst(4)), line: n))
            } else if trimmed == "<-- (no reply)" {
                steps.append(.expectNoReply(line: n))
            } else if trimmed == "<-- (closed)" {
                steps.append(.expectClosed(line: n))
            } else if trimmed.hasPrefix("<~~ ") {
                let text = String(trimmed.dropFirst(4))
                if case let .expectUnordered(group, first)? = steps.last {
                    steps[steps.count - 1] = .expectUnordered(group + [text], line: first)
                } else {
                    steps.append(.expectUnordered([text], line: n))
                }
            } else if trimmed.hasPrefix("<-- ") {
                steps.append(.expect(String(trimmed.dropFirst(4)), line: n))
            } else {
                throw ScriptError(file: name, line: n, message: "a line must start with -->, <--, #! or //")
            }
        }
        self.settings = settings
        self.steps = steps
    }

    public static func load(_ url: URL) throws -> WireScript {
        try WireScript(name: url.lastPathComponent, text: String(contentsOf: url, encoding: .utf8))
    }

    /// The `.jsonrpc` / `.contract` files of a folder, sorted by name.
    public static func loadAll(in folder: URL, extension ext: String) throws -> [WireScript] {
        try FileManager.default.contentsOfDirectory(at: folder, includingPropertiesForKeys: nil)
            .filter { $0.pathExtension == ext }
            .sorted { $0.lastPathComponent < $1.lastPathComponent }
            .map(load)
    }

    /// Every request line this script sends that parses as a JSON object (for contract checks).
    public var sentRequests: [(line: Int, request: JSONValue)] {
        steps.compactMap { step in
            if case let .send(text, line) = step, let v = try? JSONValue.parse(text), v.objectValue != nil {
                return (line, v)
            }
            return nil
        }
    }
}

public struct ScriptError: Error, CustomStringConvertible {
    public let file: String
    public let line: Int
    public let message: String
    public var description: String { "\(file):\(line): \(message)" }
    public init(file: String, line: Int, message: String) {
        self.file = file
        self.line = line
        self.message = message
    }
}

/// A reply observed while running a script, paired with the request that caused it (if known).
public struct ObservedExchange: Sendable {
    public let request: JSONValue?
    public let reply: JSONValue
}

public enum WireScriptRunner {
    /// Runs `script` over a fresh connection to `port`; returns every failure (empty: passed) and
    /// the exchanges seen, for further checks (contract schemas).
    /// `variables` are available to the script as `"${NAME}"` from the start (values a test mints).
    public static func run(_ script: WireScript, port: Int, host: String = "127.0.0.1", variables: [String: JSONValue] = [:]) async throws
        -> (failures: [String], exchanges: [ObservedExchange])
    {
        let client = try await LineClient.connect(host: host, port: port)
        defer { Task { await client.close() } }
        var matcher = JSONMatcher()
        matcher.captures = variables
        var failures: [String] = []
        var exchanges: [ObservedExchange] = []
        var sentByID: [JSONValue: JSONValue] = [:]
        var sentinel = 0

        func where_(_ line: Int) -> String { "\(script.name):\(line)" }

        for step in script.steps {
            switch step {
            case let .send(text, _):
                let line = matcher.substitute(text)
                if let request = try? JSONValue.parse(line), let id = request["id"] { sentByID[id] = request }
                try await client.send(line: line)
            case let .sendBytes(bytes, _):
                try await client.send(bytes: bytes)
            case let .expect(text, line):
                let expected: JSONValue
                do { expected = try JSONValue.parse(text) } catch {
                    failures.append("\(where_(line)): expected line is not JSON: \(text)")
                    continue
                }
                switch try await client.next() {
                case .closed:
                    failures.append("\(where_(line)): connection closed, expected \(text)")
                    return (failures, exchanges)
                case .line(let got):
                    guard let actual = try? JSONValue.parse(got) else {
                        failures.append("\(where_(line)): reply is not JSON: \(got)")
                        continue
                    }
                    let problems = matcher.mismatches(expected: expected, actual: actual)
                    failures += problems.map { "\(where_(line)): \($0)\n    got: \(got)" }
                    exchanges.append(ObservedExchange(request: actual["id"].flatMap { sentByID[$0] }, reply: actual))
                }
            case let .expectNoReply(line):
                sentinel += 1
                let id = "no-reply-sentinel-\(sentinel)"
                try await client.send(line: #"{"jsonrpc":"2.0","method":"rpc.ping","id":"\#(id)"}"#)
                switch try await client.next() {
                case .closed:
                    failures.append("\(where_(line)): connection closed, expected no reply")
                    return (failures, exchanges)
                case .line(let got):
                    let actual = try? JSONValue.parse(got)
                    if actual?["id"] != .string(id) {
                        failures.append("\(where_(line)): expected no reply, got \(got)")
                        // The sentinel's own reply is still to come; consume it.
                        _ = try await client.next()
                    }
                }
            case let .expectUnordered(texts, line):
                var remaining = try texts.map { try JSONValue.parse($0) }
                for _ in texts {
                    guard case .line(let got) = try await client.next(), let actual = try? JSONValue.parse(got) else {
                        failures.append("\(where_(line)): connection closed or non-JSON reply in an unordered group")
                        return (failures, exchanges)
                    }
                    var probe = matcher
                    guard let i = remaining.firstIndex(where: { probe.mismatches(expected: $0, actual: actual).isEmpty }) else {
                        failures.append("\(where_(line)): reply matches none of the expected group: \(got)")
                        continue
                    }
                    _ = matcher.mismatches(expected: remaining[i], actual: actual)  // keep its captures
                    remaining.remove(at: i)
                    exchanges.append(ObservedExchange(request: actual["id"].flatMap { sentByID[$0] }, reply: actual))
                }
            case let .expectClosed(line):
                switch try await client.next() {
                case .closed: break
                case .line(let got): failures.append("\(where_(line)): expected the connection to close, got \(got)")
                }
            }
        }
        return (failures, exchanges)
    }
}
