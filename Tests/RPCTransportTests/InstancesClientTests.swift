import Foundation
import JSONRPC
import NIOCore
import NIOPosix
import RPCTestSupport
import RPCTransport
import Testing

private enum WhoAmI: RPCMethod {
    typealias Params = EmptyParams
    typealias Result = String
    static let name = "test.whoami"
    static let summary = "The instance's name."
}

/// One client over several instances of a service (`host:port,host:port`): calls spread over them, an instance
/// that cannot be reached is taken out and its calls go to the others.
@Suite struct InstancesClientTests {
    static func instance(_ name: String) async throws -> RPCServer {
        var router = RPCRouter()
        router.registerImmediate(WhoAmI.self) { _, _ in name }
        return try await TestServer.start(router: router)
    }

    static func calls(_ client: RPCClient, _ count: Int) async throws -> [String: Int] {
        try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<count { group.addTask { try await client.call(WhoAmI.self, EmptyParams()) } }
            var seen: [String: Int] = [:]
            for try await name in group { seen[name, default: 0] += 1 }
            return seen
        }
    }

    /// A host name is looked up off the caller's thread (NIO's blocking pool) and connected to; a name that does not
    /// resolve is `unavailable`, not a hang or a crash.
    @Test func aHostNameIsResolvedAndAnUnknownOneIsUnavailable() async throws {
        let server = try await Self.instance("named")
        defer { Task { await server.shutdown() } }
        let client = try RPCClient(address: "localhost:\(server.localPort!)", configuration: .init(connections: 2))
        defer { Task { await client.close() } }
        #expect(try await Self.calls(client, 10) == ["named": 10])
        let nowhere = try RPCClient(address: "no-such-host.invalid:7101", configuration: .init(connections: 1, callTimeout: .seconds(30)))
        defer { Task { await nowhere.close() } }
        let error = await #expect(throws: RPCError.self) { _ = try await nowhere.call(WhoAmI.self, EmptyParams()) }
        #expect(error?.knownCode == .unavailable)
    }

    @Test func callsAreSpreadEvenlyOverTheInstances() async throws {
        let servers = [try await Self.instance("a"), try await Self.instance("b"), try await Self.instance("c")]
        defer { Task { for s in servers { await s.shutdown() } } }
        let client = try RPCClient(
            address: servers.map { "127.0.0.1:\($0.localPort!)" }.joined(separator: ","), configuration: .init(connections: 2))
        defer { Task { await client.close() } }
        #expect(try await Self.calls(client, 300) == ["a": 100, "b": 100, "c": 100])
        #expect(client.ejectedInstances.isEmpty)
    }

    @Test func anInstanceThatIsDownIsTakenOutAndNoCallFails() async throws {
        let a = try await Self.instance("a")
        let b = try await Self.instance("b")
        let down = try LoopbackPort.free()  // nothing listens here
        defer {
            Task {
                await a.shutdown(); await b.shutdown()
            }
        }
        // Ejections long enough that a loaded machine cannot outlast them between the calls and the checks.
        var patient = RPCClientConfiguration()
        patient.ejection = .seconds(120)
        let client = try RPCClient(address: "127.0.0.1:\(a.localPort!),127.0.0.1:\(down),127.0.0.1:\(b.localPort!)", configuration: patient)
        defer { Task { await client.close() } }
        let seen = try await Self.calls(client, 300)
        #expect(seen.values.reduce(0, +) == 300, "every call answered")
        #expect(Set(seen.keys) == ["a", "b"])
        #expect(client.ejectedInstances == ["127.0.0.1:\(down)"])

        // An instance that stops while in use: a call sent on a connection the client has not yet seen close
        // may fail, as retryable `unavailable` (it may have run: only the caller can retry it, with its key);
        // then the instance is out and every call goes to the other one.
        let stopped = "127.0.0.1:\(a.localPort!)"
        await a.shutdown()
        let during = await withTaskGroup(of: String.self) { group in
            for _ in 0..<100 {
                group.addTask {
                    do { return try await client.call(WhoAmI.self, EmptyParams()) } catch let e as RPCError {
                        return e.knownCode == .unavailable ? "unavailable" : "\(e)"
                    } catch { return "\(error)" }
                }
            }
            var all: Set<String> = []
            for await outcome in group { all.insert(outcome) }
            return all
        }
        #expect(during.isSubset(of: ["b", "unavailable"]), "\(during)")
        #expect(try await Self.calls(client, 100) == ["b": 100])
        #expect(Set(client.ejectedInstances) == ["127.0.0.1:\(down)", stopped])
    }

    /// `callRaw(on:)`, as the edge calls from its event loops: answered on that loop, spread over the instances,
    /// and when an instance stops, its calls go to the other one (through the async path that reconnects).
    @Test func callsMadeOnAnEventLoopAreAnsweredThereAndSpreadOverTheInstances() async throws {
        let a = try await Self.instance("a")
        let b = try await Self.instance("b")
        defer { Task { await b.shutdown() } }
        var patient = RPCClientConfiguration(connections: 4)
        patient.ejection = .seconds(120)
        let client = try RPCClient(address: "127.0.0.1:\(a.localPort!),127.0.0.1:\(b.localPort!)", configuration: patient)
        defer { Task { await client.close() } }
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        func onTheLoop(_ count: Int) async -> [String] {
            let calls = (0..<count).map { _ in
                client.callRaw(method: WhoAmI.name, params: nil, on: loop).map { bytes -> String in
                    guard loop.inEventLoop else { return "answered off the loop" }
                    return String(decoding: bytes, as: UTF8.self)
                }
            }
            var outcomes: [String] = []
            for call in calls {
                do { outcomes.append(try await call.get()) } catch let e as RPCError {
                    outcomes.append(e.knownCode == .unavailable ? "unavailable" : "\(e)")
                } catch { outcomes.append("\(error)") }
            }
            return outcomes
        }
        // The first calls open the connections (the async path); then calls go straight onto them.
        let first = await onTheLoop(200)
        #expect(Set(first) == [#""a""#, #""b""#], "\(Set(first))")
        let second = await onTheLoop(200)
        #expect(second.filter { $0 == #""a""# }.count == 100 && second.filter { $0 == #""b""# }.count == 100)

        await a.shutdown()
        let during = await onTheLoop(100)
        #expect(Set(during).isSubset(of: [#""b""#, "unavailable"]), "\(Set(during))")
        #expect(Set(await onTheLoop(100)) == [#""b""#])
    }

    /// Calls with an affinity key (the edge passes the session) all go to one instance, on both paths, and every client
    /// agrees whatever the order of its list; keys spread over the instances; when one stops, only its keys move.
    @Test func callsWithAnAffinityKeyGoToOneInstanceAndOnlyAStoppedOnesKeysMove() async throws {
        let a = try await Self.instance("a")
        let b = try await Self.instance("b")
        let c = try await Self.instance("c")
        defer {
            Task {
                await b.shutdown(); await c.shutdown()
            }
        }
        var patient = RPCClientConfiguration(connections: 2)
        patient.ejection = .seconds(120)
        let list = [a, b, c].map { "127.0.0.1:\($0.localPort!)" }
        let client = try RPCClient(address: list.joined(separator: ","), configuration: patient)
        let reversed = try RPCClient(address: list.reversed().joined(separator: ","), configuration: patient)
        defer {
            Task {
                await client.close(); await reversed.close()
            }
        }
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        let keys = (0..<60).map { "session-\($0)" }
        func instances(of key: String) async -> Set<String> {
            var seen: Set<String> = []
            for _ in 0..<3 {
                for answer in [
                    try? await client.call(WhoAmI.self, EmptyParams(), affinity: key),
                    try? await reversed.call(WhoAmI.self, EmptyParams(), affinity: key),
                    try? await client.callRaw(method: WhoAmI.name, params: nil, affinity: key, on: loop).map {
                        String(decoding: $0, as: UTF8.self).trimmingCharacters(in: ["\""])
                    }.get(),
                ] {
                    seen.insert(answer ?? "unavailable")
                }
            }
            return seen
        }
        var before: [String: String] = [:]
        for key in keys {
            let seen = await instances(of: key)
            #expect(seen.count == 1, "\(key): \(seen)")
            before[key] = seen.first
        }
        #expect(Set(before.values) == ["a", "b", "c"])

        await a.shutdown()
        for key in keys { _ = await instances(of: key) }  // calls sent as it stopped may fail: then it is out
        for key in keys {
            let seen = await instances(of: key)
            if before[key] == "a" {
                #expect(seen.count == 1 && seen.isSubset(of: ["b", "c"]), "\(key): \(seen)")
            } else {
                #expect(seen == [before[key]!], "\(key) moved: \(seen)")
            }
        }
    }

    /// A hung instance still accepts connections: a keyed call to it times out, then its keys go to their next choice
    /// while it stays silent, and the other instances' keys stay where they were.
    @Test func keyedCallsPassByAnInstanceThatDoesNotAnswer() async throws {
        var silent = RPCRouter()
        silent.register(WhoAmI.self) { _, _ in
            try await Task.sleep(for: .seconds(5))
            return "a"
        }
        let a = try await TestServer.start(router: silent)
        let b = try await Self.instance("b")
        let c = try await Self.instance("c")
        defer {
            Task {
                await a.shutdown(); await b.shutdown(); await c.shutdown()
            }
        }
        var impatient = RPCClientConfiguration(connections: 1, callTimeout: .milliseconds(300))
        impatient.ejection = .seconds(120)
        let list = [a, b, c].map { "127.0.0.1:\($0.localPort!)" }
        let client = try RPCClient(address: list.joined(separator: ","), configuration: impatient)
        defer { Task { await client.close() } }
        let seeds = list.map(InstanceAffinity.seed(address:))
        let names = ["a", "b", "c"]
        let keys = (0..<60).map { "session-\($0)" }
        let onA = keys.filter { InstanceAffinity.ranked(key: $0, seeds: seeds)[0] == 0 }
        #expect(!onA.isEmpty)
        let error = await rpcError { try await client.call(WhoAmI.self, EmptyParams(), affinity: onA[0]) }
        #expect(error?.knownCode == .unavailable && error?.reason == "timeout")
        for key in keys {
            let ranked = InstanceAffinity.ranked(key: key, seeds: seeds)
            let expected = names[ranked[0] == 0 ? ranked[1] : ranked[0]]
            #expect(try await client.call(WhoAmI.self, EmptyParams(), affinity: key) == expected, "\(key)")
        }
        #expect(client.ejectedInstances.isEmpty, "it was never out for unkeyed calls")
    }

    @Test func whenNoInstanceCanBeReachedTheCallIsUnavailable() async throws {
        var patient = RPCClientConfiguration()
        patient.ejection = .seconds(120)
        let client = try RPCClient(address: "127.0.0.1:\(try LoopbackPort.free()),127.0.0.1:\(try LoopbackPort.free())", configuration: patient)
        defer { Task { await client.close() } }
        let error = await rpcError { try await client.call(WhoAmI.self, EmptyParams()) }
        #expect(error?.knownCode == .unavailable)
        #expect(error?.reason == "connectFailed")
        #expect(client.ejectedInstances.count == 2)
    }

    @Test func addressListsAreParsedStrictly() throws {
        let parsed = try RPCClient.parseAddresses("10.0.0.5:7101, accounts-2:7101,[::1]:7101")
        #expect(parsed.map { "\($0.host) \($0.port)" } == ["10.0.0.5 7101", "accounts-2 7101", "::1 7101"])
        for bad in ["", "a:1,", "a:1,a:1", "a:1,b", "a:1,b:70000", ",a:1"] {
            #expect(throws: RPCError.self, "\(bad)") { try RPCClient.parseAddresses(bad) }
        }
        #expect(try RPCClient(address: "127.0.0.1:1,127.0.0.1:2").address == "127.0.0.1:1,127.0.0.1:2")
    }
}
