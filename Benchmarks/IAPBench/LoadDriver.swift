import ArgumentParser
import Crypto
import Foundation
import JSONRPC
import NIOConcurrencyHelpers
import NIOCore
import RPCTransport

/// Load options every RPC scenario takes.
struct LoadOptions: ParsableArguments {
    @Option(help: "TCP connections to the service under test.") var connections = 8
    @Option(name: .customLong("in-flight"), help: "Requests in flight per connection (closed loop).") var inFlight = 4
    @Option(help: "Seconds to measure (closed loop); the run also ends when the scenario runs out of requests.") var duration = 10.0
    @Option(help: "Seconds of load before measuring starts.") var warmup = 2.0
    @Option(help: "Open loop: requests per second at fixed intervals (latency from the intended send time). 0 = closed loop.")
    var rate = 0.0
    @Flag(help: "Print one JSON object instead of the table.") var json = false
    @Option(name: .customLong("rss"), help: "Comma-separated executable names whose peak RSS to sample from /proc during the run.")
    var rssProcesses = "accounts-service,catalog-service,verification-service,fulfillment-service,appstore-sim"
    @Flag(name: .customLong("no-machine-peer"), help: "Skip the one-second measure of this machine's speed before the load.")
    var noMachinePeer = false

    /// `notes` with the `machine` line (`MachinePeer`), unless skipped or already there.
    func withMachinePeer(_ notes: [String: String]) -> [String: String] {
        guard !noMachinePeer, notes["machine"] == nil else { return notes }
        return notes.merging(["machine": MachinePeer.note()]) { $1 }
    }
}

/// How fast this machine is at the moment of a run: ECDSA P-256 signatures a second on one core (swift-crypto), in the
/// benchmark's process, before the load. This VM's speed moves by up to 3x between days, and by 1.7x within minutes,
/// with the same code (this measure: 73,635/s on 2026-11-23, 21,841-38,090 on 2026-11-29), so figures of runs made at
/// different times compare only through it; within one series, compare the runs themselves.
enum MachinePeer {
    static func signaturesPerSecond(seconds: Double = 1) -> Int {
        let key = P256.Signing.PrivateKey()
        let digest = SHA256.hash(data: Array("bench".utf8))
        let start = DispatchTime.now().uptimeNanoseconds, span = UInt64(seconds * 1e9)
        var signatures = 0
        while DispatchTime.now().uptimeNanoseconds - start < span {
            _ = try? key.signature(for: digest)
            signatures += 1
        }
        return Int(Double(signatures) / seconds)
    }

    static func note(_ rate: Int = signaturesPerSecond()) -> String {
        "ECDSA P-256 signatures on one core (swift-crypto), before the load: \(rate)/s"
    }
}

/// The outcome of one call, for the error table.
enum CallOutcome: Sendable {
    case ok
    case failed(code: Int)

    /// Pseudo-codes for failures that are not JSON-RPC errors.
    static let unexpectedResult = 0
    static let noRequestsLeft = -2
    static let otherError = -1
}

/// Runs a scenario's calls closed-loop (connections x in-flight workers, each sending its next call
/// when the last answer arrives) or open-loop at a fixed rate, records each latency exactly (every
/// sample kept, percentiles from the sorted set), counts errors by code, and samples peak RSS.
struct LoadDriver {
    let options: LoadOptions

    struct Report: Codable {
        var scenario: String
        var mode: String
        var connections: Int
        var inFlight: Int
        var targetRate: Double?
        var seconds: Double
        var requests: Int
        var requestsPerSecond: Double
        var latencyMs: [String: Double]
        var errors: [String: Int]
        var peakRssMiB: [String: Double]
        var notes: [String: String]
    }

    /// `call(client, i)` (an RPC client, or an HTTP client for the edge scenarios) performs request number `i` (0-based, in issue order) and returns its outcome;
    /// nil means the scenario has no more requests.
    func run<Client: Sendable>(
        scenario: String, clients: [Client], notes: [String: String] = [:],
        call: @escaping @Sendable (Client, Int) async -> CallOutcome?
    ) async throws -> Report {
        let notes = options.withMachinePeer(notes)
        let sampler = RSSSampler(names: options.rssProcesses.split(separator: ",").map(String.init))
        sampler.start()
        let counter = NIOLockedValueBox(0)
        let nextIndex: @Sendable () -> Int = {
            counter.withLockedValue { v in
                defer { v += 1 }; return v
            }
        }

        if options.warmup > 0 {
            _ =
                options.rate > 0
                ? await openLoop(clients: clients, seconds: options.warmup, next: nextIndex, call: call)
                : await closedLoop(clients: clients, seconds: options.warmup, next: nextIndex, call: call)
        }
        let measured =
            options.rate > 0
            ? await openLoop(clients: clients, seconds: options.duration, next: nextIndex, call: call)
            : await closedLoop(clients: clients, seconds: options.duration, next: nextIndex, call: call)
        sampler.stop()
        return report(
            scenario: scenario, connections: clients.count, latenciesUs: measured.latenciesUs, errors: measured.errors,
            seconds: measured.seconds, peakRssMiB: sampler.peaksMiB(), notes: notes)
    }

    /// The closed loop on the event loops (`PipelinedLoad`): one method, answers checked by their first bytes.
    func runPipelined(
        scenario: String, address: String, method: String, notes: [String: String] = [:],
        params: @escaping @Sendable (Int) -> [UInt8], expect: [UInt8]
    ) async throws -> Report {
        guard options.rate == 0 else { throw ValidationError("--pipelined is a closed loop: leave out --rate") }
        let (host, port) = try RPCClient.parseAddress(address)
        var notes = options.withMachinePeer(notes)
        let sampler = RSSSampler(names: options.rssProcesses.split(separator: ",").map(String.init))
        sampler.start()
        let measured = try await PipelinedLoad.run(
            host: host, port: port, connections: options.connections, inFlight: options.inFlight, warmup: options.warmup,
            seconds: options.duration, method: method, params: params, expect: expect)
        sampler.stop()
        notes["driver"] = "pipelined on NIO's event loops (no task per call)"
        return report(
            scenario: scenario, connections: options.connections, latenciesUs: measured.latenciesUs, errors: measured.errors,
            seconds: measured.seconds, peakRssMiB: sampler.peaksMiB(), notes: notes)
    }

    private func report(
        scenario: String, connections: Int, latenciesUs: [UInt32], errors measuredErrors: [Int: Int], seconds: Double,
        peakRssMiB: [String: Double], notes: [String: String]
    ) -> Report {
        var latencies = latenciesUs
        latencies.sort()
        func pct(_ p: Double) -> Double {
            latencies.isEmpty ? 0 : Double(latencies[min(latencies.count - 1, Int(Double(latencies.count) * p))]) / 1000
        }
        var errors: [String: Int] = [:]
        for (code, n) in measuredErrors {
            let name =
                RPCErrorCode(rawValue: code).map { "\(code) \($0.name)" }
                ?? [
                    CallOutcome.unexpectedResult: "unexpected result", CallOutcome.noRequestsLeft: "no prepared requests left",
                    CallOutcome.otherError: "other error",
                ][code] ?? "\(code)"
            errors[name] = n
        }
        return Report(
            scenario: scenario, mode: options.rate > 0 ? "open" : "closed", connections: connections, inFlight: options.inFlight,
            targetRate: options.rate > 0 ? options.rate : nil, seconds: seconds, requests: latencies.count,
            requestsPerSecond: Double(latencies.count) / max(seconds, 1e-9),
            latencyMs: [
                "p50": pct(0.5), "p90": pct(0.9), "p99": pct(0.99), "p99.9": pct(0.999),
                "max": latencies.last.map { Double($0) / 1000 } ?? 0,
            ],
            errors: errors, peakRssMiB: peakRssMiB, notes: notes)
    }

    func print(_ report: Report) {
        if options.json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            Swift.print(String(decoding: try! encoder.encode(report), as: UTF8.self))
            return
        }
        let l = report.latencyMs
        Swift.print(
            "scenario        \(report.scenario) (\(report.mode) loop\(report.targetRate.map { String(format: ", target %.0f/s", $0) } ?? ""), "
                + "\(report.connections) connections x \(report.inFlight) in flight)")
        Swift.print(String(format: "requests        %d in %.2f s", report.requests, report.seconds))
        Swift.print(String(format: "throughput      %.1f req/s", report.requestsPerSecond))
        Swift.print(
            String(
                format: "latency ms      p50 %.2f  p90 %.2f  p99 %.2f  p99.9 %.2f  max %.2f",
                l["p50"] ?? 0, l["p90"] ?? 0, l["p99"] ?? 0, l["p99.9"] ?? 0, l["max"] ?? 0))
        Swift.print(
            "errors          \(report.errors.isEmpty ? "none" : report.errors.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: ", "))"
        )
        for (name, mib) in report.peakRssMiB.sorted(by: { $0.key < $1.key }) {
            Swift.print(String(format: "peak RSS        %-22@ %.1f MiB", name as NSString, mib))
        }
        for (k, v) in report.notes.sorted(by: { $0.key < $1.key }) { Swift.print("\(k.padding(toLength: 16, withPad: " ", startingAt: 0))\(v)") }
    }

    private struct Measured {
        var latenciesUs: [UInt32] = []
        var errors: [Int: Int] = [:]
        var seconds: Double = 0
    }

    private func closedLoop<Client: Sendable>(
        clients: [Client], seconds: Double, next: @escaping @Sendable () -> Int,
        call: @escaping @Sendable (Client, Int) async -> CallOutcome?
    ) async -> Measured {
        let start = DispatchTime.now().uptimeNanoseconds
        let end = start + UInt64(seconds * 1e9)
        let parts = await withTaskGroup(of: Measured.self) { group in
            for client in clients {
                for _ in 0..<options.inFlight {
                    group.addTask {
                        var m = Measured()
                        while DispatchTime.now().uptimeNanoseconds < end {
                            let t0 = DispatchTime.now().uptimeNanoseconds
                            guard let outcome = await call(client, next()) else { break }
                            let us = (DispatchTime.now().uptimeNanoseconds - t0) / 1000
                            switch outcome {
                            case .ok: m.latenciesUs.append(UInt32(min(us, UInt64(UInt32.max))))
                            case .failed(let code): m.errors[code, default: 0] += 1
                            }
                        }
                        return m
                    }
                }
            }
            var all: [Measured] = []
            for await m in group { all.append(m) }
            return all
        }
        var total = Measured()
        for p in parts {
            total.latenciesUs += p.latenciesUs
            total.errors.merge(p.errors, uniquingKeysWith: +)
        }
        total.seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
        return total
    }

    /// Sends request i at start + i/rate whatever happened to earlier ones; latency counts from that
    /// intended time, so a stall shows up in every request it delayed (no coordinated omission).
    private func openLoop<Client: Sendable>(
        clients: [Client], seconds: Double, next: @escaping @Sendable () -> Int,
        call: @escaping @Sendable (Client, Int) async -> CallOutcome?
    ) async -> Measured {
        let total = Int(options.rate * seconds)
        let interval = 1e9 / options.rate
        let start = DispatchTime.now().uptimeNanoseconds
        let results = await withTaskGroup(of: (UInt64, CallOutcome?).self) { group in
            for i in 0..<total {
                let intended = start + UInt64(Double(i) * interval)
                let now = DispatchTime.now().uptimeNanoseconds
                if intended > now { try? await Task.sleep(nanoseconds: intended - now) }
                let client = clients[i % clients.count]
                group.addTask {
                    let outcome = await call(client, next())
                    return ((DispatchTime.now().uptimeNanoseconds - intended) / 1000, outcome)
                }
            }
            var all: [(UInt64, CallOutcome?)] = []
            for await r in group { all.append(r) }
            return all
        }
        var m = Measured()
        for (us, outcome) in results {
            switch outcome {
            case .ok?: m.latenciesUs.append(UInt32(min(us, UInt64(UInt32.max))))
            case .failed(let code)?: m.errors[code, default: 0] += 1
            case nil: m.errors[CallOutcome.noRequestsLeft, default: 0] += 1
            }
        }
        m.seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
        return m
    }
}

/// Peak resident set size of named processes, sampled from /proc every 100 ms on its own thread.
final class RSSSampler: Sendable {
    private let names: [String]
    private let peaks = NIOLockedValueBox<[String: Int]>([:])
    private let running = NIOLockedValueBox(false)

    init(names: [String]) { self.names = names }

    func start() {
        running.withLockedValue { $0 = true }
        let thread = Thread { [self] in
            while running.withLockedValue({ $0 }) {
                sample()
                Thread.sleep(forTimeInterval: 0.1)
            }
        }
        thread.start()
        sample()
    }

    func stop() {
        running.withLockedValue { $0 = false }
        sample()
    }

    func peaksMiB() -> [String: Double] {
        peaks.withLockedValue { $0.mapValues { Double($0) / 1024 } }
    }

    /// Current RSS in KiB of each named process (by /proc/PID/comm, which holds the first 15 bytes).
    static func current(names: [String]) -> [String: Int] {
        var out: [String: Int] = [:]
        guard let pids = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return out }
        for pid in pids where pid.allSatisfy(\.isNumber) {
            guard
                let comm = try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8)
                    .trimmingCharacters(in: .whitespacesAndNewlines),
                let name = names.first(where: { String($0.prefix(15)) == comm }),
                let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
                let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
                let kib = Int(line.split(separator: " ").dropFirst().first ?? "")
            else { continue }
            out[name] = max(out[name] ?? 0, kib)
        }
        return out
    }

    private func sample() {
        let now = Self.current(names: names)
        peaks.withLockedValue { peaks in
            for (name, kib) in now { peaks[name] = max(peaks[name] ?? 0, kib) }
        }
    }
}
