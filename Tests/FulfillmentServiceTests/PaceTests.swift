import Testing

@testable import FulfillmentService

/// Finish Transaction calls keep to Apple's documented rate: each waits its turn, a gap of 1/rate after the one before.
@Suite struct PaceTests {
    @Test func callsAreSpacedAtTheRate() async {
        let pace = Pace(perSecond: 20)
        let elapsed = await ContinuousClock().measure { for _ in 0..<5 { await pace.next() } }
        #expect(elapsed >= .milliseconds(195), "five calls at 20 a second take at least four gaps of 50 ms: \(elapsed)")
    }
}
