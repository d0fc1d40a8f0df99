import Foundation
import IAPProtocol
import Logging
import PlaySimulator
import RPCTestSupport
import RPCTransport
import Testing

@Suite struct PlaySimulatorContractTests {
    @Test func everyPlayMethodKeepsItsContract() async throws {
        let failures = try await ContractHarness.run(service: "play-sim", declared: ContractMethods.playSimulator) {
            let dir = FileManager.default.temporaryDirectory.appendingPathComponent("play-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
            var quiet = Logger(label: "play-contract")
            quiet.logLevel = .critical
            let simulator = try PlaySimulator(directory: dir, publicURL: "http://127.0.0.1:9")
            let server = RPCServer(configuration: .init(serviceName: "play-sim"), router: simulator.router(), logger: quiet)
            try await server.start()
            return ContractTarget(
                port: server.localPort!,
                stop: {
                    await server.shutdown()
                    await simulator.courier.shutdown()
                })
        }
        #expect(failures.isEmpty, "\(failures.joined(separator: "\n"))")
    }
}
